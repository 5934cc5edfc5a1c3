"""Certificates for the local control plane, made with the openssl CLI (test infrastructure).

ECDSA P-256 keys (fast to generate); every certificate is signed by one cluster CA.
The `cryptography` package is not in the dev lock, and openssl is on every machine the
harness runs on.
"""

from __future__ import annotations

import ipaddress
import os
import secrets
import subprocess
import tempfile
from pathlib import Path

CA_DAYS = 3650
CERT_DAYS = 365


def _openssl(*args: str) -> None:
    result = subprocess.run(["openssl", *args], capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed: {result.stderr.strip()}")


def _subject(common_name: str, organizations: list[str] | tuple[str, ...] = ()) -> str:
    def esc(value: str) -> str:
        return value.replace("\\", "\\\\").replace("/", "\\/").replace("+", "\\+")

    return "".join(f"/O={esc(o)}" for o in organizations) + f"/CN={esc(common_name)}"


def _san_entry(name: str) -> str:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return f"DNS:{name}"
    return f"IP:{name}"


def generate_key(path: Path) -> Path:
    """Write a new EC P-256 private key (PKCS#8 PEM, mode 0600) to ``path``."""
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256",
             "-out", str(path))  # fmt: skip
    os.chmod(path, 0o600)
    return path


def public_key(private_key: Path, path: Path) -> Path:
    _openssl("pkey", "-in", str(private_key), "-pubout", "-out", str(path))
    return path


def create_ca(directory: Path, common_name: str = "tuneop-local-ca") -> tuple[Path, Path]:
    """A self-signed CA: returns (ca.crt, ca.key) in ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    key = generate_key(directory / "ca.key")
    cert = directory / "ca.crt"
    _openssl(
        "req", "-x509", "-new", "-key", str(key), "-days", str(CA_DAYS),
        "-subj", _subject(common_name), "-out", str(cert),
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,digitalSignature,keyEncipherment,keyCertSign",
        "-addext", "subjectKeyIdentifier=hash",
    )  # fmt: skip
    return cert, key


def issue_cert(
    ca_cert: Path,
    ca_key: Path,
    directory: Path,
    name: str,
    common_name: str,
    organizations: list[str] | tuple[str, ...] = (),
    sans: list[str] | tuple[str, ...] = (),
    server: bool = False,
) -> tuple[Path, Path]:
    """Issue ``<name>.crt``/``<name>.key`` in ``directory`` signed by the CA.

    Client certificates carry the Kubernetes user (CN) and groups (O); server
    certificates also get serverAuth and the subject alternative names (IPs or DNS).
    """
    directory.mkdir(parents=True, exist_ok=True)
    key = generate_key(directory / f"{name}.key")
    cert = directory / f"{name}.crt"
    usages = "serverAuth,clientAuth" if server else "clientAuth"
    ext = [
        "basicConstraints=critical,CA:FALSE",
        "keyUsage=critical,digitalSignature,keyEncipherment",
        f"extendedKeyUsage={usages}",
        "authorityKeyIdentifier=keyid",
    ]
    if sans:
        ext.append("subjectAltName=" + ",".join(_san_entry(s) for s in sans))
    with tempfile.TemporaryDirectory() as tmp:
        csr = Path(tmp) / "req.csr"
        extfile = Path(tmp) / "ext.cnf"
        extfile.write_text("\n".join(ext) + "\n")
        _openssl("req", "-new", "-key", str(key), "-subj",
                 _subject(common_name, organizations), "-out", str(csr))  # fmt: skip
        _openssl(
            "x509", "-req", "-in", str(csr), "-CA", str(ca_cert), "-CAkey", str(ca_key),
            "-set_serial", str(secrets.randbits(63)), "-days", str(CERT_DAYS),
            "-extfile", str(extfile), "-out", str(cert),
        )  # fmt: skip
    return cert, key
