"""Test certificates for the gRPC scaler and the HTTPS server, made at test time with the ``openssl`` CLI.

Two CAs, so that a certificate rotation is observable from a client: ``ca`` signs the server
certificate ``server`` and the client certificate ``client``; ``ca2`` signs ``server2`` (the rotated
server certificate). ``rogue`` is a self-signed client certificate no CA vouches for. EC P-256 keys,
valid for two days; server certificates name ``127.0.0.1`` and ``localhost``.
"""

from __future__ import annotations

import shutil
import ssl
import subprocess
from dataclasses import dataclass
from pathlib import Path

_EC = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")


@dataclass(frozen=True)
class Pair:
    crt: Path
    key: Path

    def read(self) -> tuple[bytes, bytes]:
        """(certificate chain, private key) as gRPC's credential functions want them."""
        return self.crt.read_bytes(), self.key.read_bytes()


@dataclass(frozen=True)
class PKI:
    dir: Path
    ca: Path
    ca2: Path
    server: Pair
    server2: Pair
    client: Pair
    rogue: Pair

    def client_ctx(self, cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
        """A client's TLS context trusting ``ca`` (the CA of ``server``), with a certificate if given."""
        ctx = ssl.create_default_context(cafile=str(self.ca))
        if cert is not None:
            ctx.load_cert_chain(cert, key)
        return ctx


def have_openssl() -> bool:
    return shutil.which("openssl") is not None


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def _self_signed(d: Path, name: str) -> Path:
    _openssl("req", "-x509", *_EC, "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "2",
             "-subj", f"/CN={name}", cwd=d)  # fmt: skip
    return d / f"{name}.crt"


def _signed(d: Path, name: str, ca: str, ext: str) -> Pair:
    (d / f"{name}.ext").write_text(ext)
    _openssl("req", *_EC, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext",
             cwd=d)  # fmt: skip
    return Pair(d / f"{name}.crt", d / f"{name}.key")


def make_pki(d: Path) -> PKI:
    """Write the CAs and certificates into ``d`` (which must exist)."""
    server_ext = "subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n"
    ca = _self_signed(d, "ca")
    ca2 = _self_signed(d, "ca2")
    server = _signed(d, "server", "ca", server_ext)
    server2 = _signed(d, "server2", "ca2", server_ext)
    client = _signed(d, "client", "ca", "extendedKeyUsage=clientAuth\n")
    rogue_crt = _self_signed(d, "rogue")
    return PKI(d, ca, ca2, server, server2, client, Pair(rogue_crt, d / "rogue.key"))
