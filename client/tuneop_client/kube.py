"""The API server as the client uses it: the kubeconfig's current context (or the one
named), its namespace, and the few calls `tuneop` makes."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import tuneop_contract as contract
import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException


class ClientError(RuntimeError):
    """A failure to report in one line (no traceback)."""


@dataclasses.dataclass
class Cluster:
    """Clients for the kubeconfig's context; `namespace` is the one the user asked for,
    else the context's, else "default"."""

    namespace: str
    kubeconfig: str | None
    context: str | None
    core: client.CoreV1Api
    custom: client.CustomObjectsApi

    @classmethod
    def connect(
        cls, namespace: str | None = None, kubeconfig: str | None = None, context: str | None = None
    ) -> Cluster:
        try:
            config.load_kube_config(config_file=kubeconfig, context=context)  # type: ignore[no-untyped-call]
            contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)  # type: ignore[no-untyped-call]
        except (config.ConfigException, OSError) as exc:
            raise ClientError(f"no cluster to talk to (kubeconfig): {exc}") from None
        used = (
            next((c for c in contexts if c.get("name") == context), active) if context else active
        )
        chosen = namespace or (used.get("context") or {}).get("namespace") or "default"
        api = client.ApiClient()
        return cls(chosen, kubeconfig, context, client.CoreV1Api(api), client.CustomObjectsApi(api))

    def kubectl_flags(self) -> list[str]:
        """The same cluster for kubectl."""
        flags = ["--kubeconfig", self.kubeconfig] if self.kubeconfig else []
        return flags + (["--context", self.context] if self.context else [])

    def create_job(self, job: dict[str, Any]) -> dict[str, Any]:
        return self._call_dict(
            self.custom.create_namespaced_custom_object,
            contract.API_GROUP, contract.CRD_VERSION, self.namespace, contract.PLURAL, job,
        )  # fmt: skip

    def job(self, name: str) -> dict[str, Any]:
        return self._call_dict(
            self.custom.get_namespaced_custom_object,
            contract.API_GROUP, contract.CRD_VERSION, self.namespace, contract.PLURAL, name,
        )  # fmt: skip

    def jobs(self) -> list[dict[str, Any]]:
        listed = self._call_dict(
            self.custom.list_namespaced_custom_object,
            contract.API_GROUP, contract.CRD_VERSION, self.namespace, contract.PLURAL,
        )  # fmt: skip
        return list(listed.get("items") or [])

    def delete_job(self, name: str) -> None:
        self._call(
            self.custom.delete_namespaced_custom_object,
            contract.API_GROUP, contract.CRD_VERSION, self.namespace, contract.PLURAL, name,
        )  # fmt: skip

    def create_configmap(self, body: dict[str, Any]) -> None:
        self._call(self.core.create_namespaced_config_map, self.namespace, body)

    def delete_configmap(self, name: str) -> None:
        """Delete it; one already gone is no error."""
        self._call(self.core.delete_namespaced_config_map, name, self.namespace, missing_ok=True)

    def own_configmap(self, name: str, job: dict[str, Any]) -> None:
        """The job owns its script's ConfigMap: deleting the job deletes it."""
        owner = {
            "apiVersion": contract.API_VERSION, "kind": contract.KIND,
            "name": job["metadata"]["name"], "uid": job["metadata"]["uid"],
        }  # fmt: skip
        patch = {"metadata": {"ownerReferences": [owner]}}
        self._call(self.core.patch_namespaced_config_map, name, self.namespace, patch)

    def pods(self, job: str) -> list[dict[str, Any]]:
        """The job's pods, as plain objects."""
        selector = f"{contract.LABEL_JOB}={job}"
        pods = self._call_dict(
            self.core.list_namespaced_pod, self.namespace, label_selector=selector
        )
        return list(pods.get("items") or [])

    def _call_dict(self, method: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        found = self._call(method, *args, **kwargs)
        if not isinstance(found, dict):
            found = self.core.api_client.sanitize_for_serialization(found)
        return dict(found)

    def _call(self, method: Any, *args: Any, missing_ok: bool = False, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except ApiException as exc:
            if missing_ok and exc.status == 404:
                return None
            raise ClientError(_reason(exc)) from None
        except (OSError, urllib3.exceptions.HTTPError) as exc:  # refused, DNS, TLS
            raise ClientError(f"cannot reach the API server: {exc}") from None


def _reason(exc: ApiException) -> str:
    """The API server's own message (its Status), not the HTTP dump."""
    try:
        message = str(json.loads(exc.body or "{}").get("message") or "")
    except ValueError:
        message = ""
    return message or f"{exc.status} {exc.reason}"
