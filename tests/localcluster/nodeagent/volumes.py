"""Materialise a pod's volumes as host directories (node agent, test infrastructure).

Each volume becomes a directory (or the bound PV's host directory) that the launcher
bind-mounts at the container's mountPath. configMap/secret/downwardAPI/projected
contents are written once, at pod start (no live updates, unlike the kubelet).
"""

from __future__ import annotations

import base64
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client

from .podspec import field_value, resource_field_value


class NotReady(Exception):
    """A volume cannot be set up yet (unbound PVC, missing ConfigMap): retry later."""


def _write(path: Path, data: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.chmod(path, mode)


def _items(
    data: dict[str, bytes], items: list[dict[str, Any]] | None, optional: bool, what: str
) -> dict[str, tuple[bytes, int | None]]:
    if not items:
        return {key: (value, None) for key, value in data.items()}
    out: dict[str, tuple[bytes, int | None]] = {}
    for item in items:
        if item["key"] not in data:
            if optional:
                continue
            raise NotReady(f"{what}: key {item['key']!r} not found")
        out[item["path"]] = (data[item["key"]], item.get("mode"))
    return out


class VolumeBuilder:
    """Builds the volumes of one pod under ``pod_dir/volumes``."""

    def __init__(
        self,
        core: client.CoreV1Api,
        pod: dict[str, Any],
        pod_dir: Path,
        pod_ip: str,
        host_ip: str,
        ca_cert: Path,
    ) -> None:
        self.core = core
        self.pod = pod
        self.pod_dir = pod_dir
        self.pod_ip = pod_ip
        self.host_ip = host_ip
        self.ca_cert = ca_cert
        self.ns = pod["metadata"]["namespace"]
        self.fs_group = ((pod["spec"].get("securityContext") or {}).get("fsGroup")) or None
        self.tokens: list[tuple[Path, str | None, int]] = []
        """Projected service-account tokens written: (file, audience, expirationSeconds)."""

    # --- API look-ups -------------------------------------------------------------
    def lookup(self, kind: str, name: str) -> dict[str, str] | None:
        raw = self._raw(kind, name)
        return None if raw is None else {k: v.decode() for k, v in raw.items()}

    def _raw(self, kind: str, name: str) -> dict[str, bytes] | None:
        try:
            if kind == "configmap":
                cm = self.core.read_namespaced_config_map(name, self.ns)
                out = {k: v.encode() for k, v in (cm.data or {}).items()}
                out.update({k: base64.b64decode(v) for k, v in (cm.binary_data or {}).items()})
                return out
            secret = self.core.read_namespaced_secret(name, self.ns)
            return {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}
        except client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _root_ca(self) -> bytes:
        data = self._raw("configmap", "kube-root-ca.crt")
        if data and "ca.crt" in data:
            return data["ca.crt"]
        return self.ca_cert.read_bytes()

    def _token(self, audience: str | None, seconds: int) -> bytes:
        spec = self.pod["spec"]
        body = client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(
                audiences=[audience] if audience else [],
                expiration_seconds=max(int(seconds), 600),
                bound_object_ref=client.V1BoundObjectReference(
                    api_version="v1",
                    kind="Pod",
                    name=self.pod["metadata"]["name"],
                    uid=self.pod["metadata"]["uid"],
                ),
            )
        )
        sa = spec.get("serviceAccountName") or "default"
        result = self.core.create_namespaced_service_account_token(sa, self.ns, body)
        return str(result.status.token).encode()

    def refresh_tokens(self) -> None:
        """Write fresh tokens (the kubelet refreshes at 80 % of their lifetime); the
        rename inside the bind-mounted volume directory is visible in the pod."""
        for path, audience, seconds in self.tokens:
            tmp = path.with_name(f".{path.name}.tmp")
            _write(tmp, self._token(audience, seconds), 0o644)
            os.replace(tmp, path)

    def token_lifetime(self) -> int | None:
        return min((max(s, 600) for _, _, s in self.tokens), default=None)

    def _downward(self, items: list[dict[str, Any]]) -> dict[str, tuple[bytes, int | None]]:
        out: dict[str, tuple[bytes, int | None]] = {}
        for item in items:
            if "fieldRef" in item:
                value = field_value(
                    self.pod, item["fieldRef"]["fieldPath"], self.pod_ip, self.host_ip
                )
            else:
                ref = item["resourceFieldRef"]
                container = next(
                    c for c in self.pod["spec"]["containers"] if c["name"] == ref["containerName"]
                )
                value = resource_field_value(container, ref["resource"], ref.get("divisor", "1"))
            out[item["path"]] = (value.encode(), item.get("mode"))
        return out

    # --- volumes --------------------------------------------------------------------
    def build(self) -> dict[str, tuple[Path, bool]]:
        """{volume name: (host path, is a managed directory)}; raises NotReady."""
        out: dict[str, tuple[Path, bool]] = {}
        for volume in self.pod["spec"].get("volumes") or []:
            out[volume["name"]] = self._build(volume)
        return out

    def _dir(self, name: str) -> Path:
        path = self.pod_dir / "volumes" / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _apply_fs_group(self, path: Path) -> None:
        if self.fs_group is None:
            return
        os.chown(path, -1, int(self.fs_group))
        os.chmod(path, os.stat(path).st_mode | 0o2070)

    def _files(self, name: str, files: dict[str, tuple[bytes, int | None]], mode: int) -> Path:
        path = self._dir(name)
        for rel, (data, item_mode) in files.items():
            _write(path / rel, data, item_mode if item_mode is not None else mode)
        return path

    def _build(self, volume: dict[str, Any]) -> tuple[Path, bool]:
        name = volume["name"]
        if "emptyDir" in volume:
            path = self._dir(name)
            self._apply_fs_group(path)
            return path, True
        if "hostPath" in volume:
            path = Path(volume["hostPath"]["path"])
            if volume["hostPath"].get("type") == "DirectoryOrCreate":
                path.mkdir(parents=True, exist_ok=True)
            return path, False
        if "persistentVolumeClaim" in volume:
            return self._pvc(volume["persistentVolumeClaim"]["claimName"]), False
        if "configMap" in volume or "secret" in volume:
            kind = "configmap" if "configMap" in volume else "secret"
            src = volume.get("configMap") or volume["secret"]
            obj = src.get("name") or src.get("secretName")
            data = self._raw(kind, obj)
            if data is None:
                if src.get("optional"):
                    data = {}
                else:
                    raise NotReady(f"{kind} {obj!r} not found")
            files = _items(data, src.get("items"), bool(src.get("optional")), f"{kind} {obj}")
            return self._files(name, files, int(src.get("defaultMode", 0o644))), True
        if "downwardAPI" in volume:
            src = volume["downwardAPI"]
            files = self._downward(src.get("items") or [])
            return self._files(name, files, int(src.get("defaultMode", 0o644))), True
        if "projected" in volume:
            return self._projected(name, volume["projected"]), True
        raise NotReady(f"volume {name!r}: unsupported volume type {sorted(volume)}")

    def _projected(self, name: str, src: dict[str, Any]) -> Path:
        files: dict[str, tuple[bytes, int | None]] = {}
        for source in src.get("sources") or []:
            if "serviceAccountToken" in source:
                tok = source["serviceAccountToken"]
                seconds = int(tok.get("expirationSeconds", 3607))
                files[tok["path"]] = (self._token(tok.get("audience"), seconds), None)
                self.tokens.append((self.pod_dir / "volumes" / name / tok["path"],
                                    tok.get("audience"), seconds))  # fmt: skip
            elif "configMap" in source or "secret" in source:
                kind = "configmap" if "configMap" in source else "secret"
                ref = source.get("configMap") or source["secret"]
                if kind == "configmap" and ref["name"] == "kube-root-ca.crt":
                    data: dict[str, bytes] | None = {"ca.crt": self._root_ca()}
                else:
                    data = self._raw(kind, ref["name"])
                if data is None:
                    if ref.get("optional"):
                        continue
                    raise NotReady(f"{kind} {ref['name']!r} not found")
                label = f"{kind} {ref['name']}"
                files.update(_items(data, ref.get("items"), bool(ref.get("optional")), label))
            elif "downwardAPI" in source:
                files.update(self._downward(source["downwardAPI"].get("items") or []))
        return self._files(name, files, int(src.get("defaultMode", 0o644)))

    def _pvc(self, claim: str) -> Path:
        try:
            pvc = self.core.read_namespaced_persistent_volume_claim(claim, self.ns)
        except client.ApiException as exc:
            if exc.status == 404:
                raise NotReady(f"persistentvolumeclaim {claim!r} not found") from exc
            raise
        if pvc.status.phase != "Bound" or not pvc.spec.volume_name:
            raise NotReady(f"persistentvolumeclaim {claim!r} is not bound")
        pv = self.core.read_persistent_volume(pvc.spec.volume_name)
        source = pv.spec.host_path or pv.spec.local
        if source is None:
            raise NotReady(f"persistentvolume {pv.metadata.name!r} has no hostPath/local path")
        path = Path(source.path)
        path.mkdir(parents=True, exist_ok=True)
        self._apply_fs_group(path)
        return path


def remove_tree(path: Path, on_error: Callable[[str], None] | None = None) -> None:
    try:
        shutil.rmtree(path)
    except FileNotFoundError:
        pass
    except OSError as exc:
        if on_error:
            on_error(f"cannot remove {path}: {exc}")
