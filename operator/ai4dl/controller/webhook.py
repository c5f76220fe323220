"""The admission webhook's TLS: the serving certificate and the webhook configuration's CA bundle.

Two ways, chosen by ``--webhook-cert-dir``:

- **self-signed** (the default, no flag): the operator makes its own CA and a serving
  certificate for the webhook Service's DNS names (and any ``--webhook-host``), keeps the
  private keys in a private temporary folder (never in a Secret: the operator reads no Secret),
  and writes the CA into its own MutatingWebhookConfiguration's ``caBundle`` (RBAC: ``get`` and
  ``patch`` of that one object, by name). The serving certificate is renewed when a third of
  its life is left, under the same CA; the CA when a tenth of its life is left, with the old
  and the new CA both in the bundle until the old one expires, so that no call fails across a
  renewal. A restart makes a new CA (the bundle is rewritten at start).
- **files** (``--webhook-cert-dir DIR``: ``tls.crt``, ``tls.key``, e.g. cert-manager's Secret
  mounted as a volume by the kubelet): kopf's server re-reads them when they change, and
  cert-manager's CA injector keeps the bundle; the operator patches nothing.

Either way, with ``--webhook-client-ca-file`` the server authenticates its caller: only a
client certificate signed by that CA (the API server's webhook client certificate, configured
by its ``--admission-control-config-file``; optionally with a common name from
``--webhook-client-name``) gets past the TLS handshake, so nobody else can ask the webhook for a
PhaseModel's learned levels (ai4dl.controller.handlers._ReviewServer).

A webhook that is down, slow or broken never blocks pod creation: the chart's
configuration has ``failurePolicy: Ignore``, a short timeout and selectors that send only
opted-in pods outside the operator's own namespace.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import logging
import os
import shutil
import tempfile
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

log = logging.getLogger("ai4dl.operator")

CA_DAYS = 365
SERVING_DAYS = 90
#: Renew a serving certificate with this share of its life left, a CA with this share.
SERVING_RENEW_AT = 1 / 3
CA_RENEW_AT = 1 / 10
#: The webhook's path on the server (kopf serves handler ``admission`` at ``/admission``).
WEBHOOK_PATH = "/admission"


def service_names(service: str, namespace: str) -> list[str]:
    """The DNS names the API server may use for a Service reference."""
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc",
            f"{service}.{namespace}.svc.cluster.local"]


@dataclass
class KeyPair:
    cert_pem: bytes
    key_pem: bytes
    not_after: dt.datetime
    not_before: dt.datetime

    def renew_due(self, share: float, now: dt.datetime | None = None) -> bool:
        now = now or dt.datetime.now(dt.timezone.utc)
        life = (self.not_after - self.not_before).total_seconds()
        return (self.not_after - now).total_seconds() <= share * life


def _key():
    return ec.generate_private_key(ec.SECP256R1())


def _pem_key(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def make_ca(days: int = CA_DAYS, now: dt.datetime | None = None) -> tuple[KeyPair, object]:
    """A self-signed CA certificate and its key object."""
    now = now or dt.datetime.now(dt.timezone.utc)
    key = _key()
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "ai4dl-operator webhook CA")])
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                         crl_sign=True, content_commitment=False,
                                         key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False,
                                         decipher_only=False), critical=True)
            .sign(key, hashes.SHA256()))
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key),
                   cert.not_valid_after_utc, cert.not_valid_before_utc), key


def make_serving(ca: KeyPair, ca_key, hosts: Sequence[str], days: int = SERVING_DAYS,
                 now: dt.datetime | None = None) -> KeyPair:
    """A serving certificate for ``hosts`` (DNS names and IP addresses), signed by ``ca``."""
    now = now or dt.datetime.now(dt.timezone.utc)
    key = _key()
    sans = []
    for h in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(min(now + dt.timedelta(days=days), ca.not_after))
            .add_extension(x509.SubjectAlternativeName(sans), critical=False)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256()))
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _pem_key(key),
                   cert.not_valid_after_utc, cert.not_valid_before_utc)


class SelfSignedCertificates:
    """The self-signed mode's CA(s) and serving certificate, written to a private folder for
    kopf's server (which re-reads the files when they change)."""

    def __init__(self, hosts: Sequence[str], folder: str | os.PathLike | None = None):
        if not hosts:
            raise ValueError("the serving certificate needs at least one host name")
        self.hosts = list(hosts)
        self.folder = Path(folder or tempfile.mkdtemp(prefix="ai4dl-webhook-"))
        self.folder.mkdir(parents=True, exist_ok=True)
        self.folder.chmod(0o700)
        if folder is None:
            # a folder of our own holds a private key: it goes with this object or, at the
            # latest, when the process exits (SIGTERM included: kopf exits normally)
            self._removal = weakref.finalize(self, shutil.rmtree, str(self.folder),
                                             ignore_errors=True)
        self.ca, self._ca_key = make_ca()
        self.previous_ca: KeyPair | None = None
        self.serving = make_serving(self.ca, self._ca_key, self.hosts)
        self._write()

    @property
    def certfile(self) -> Path:
        return self.folder / "tls.crt"

    @property
    def keyfile(self) -> Path:
        return self.folder / "tls.key"

    def ca_bundle(self, now: dt.datetime | None = None) -> bytes:
        """The CAs a client must trust: the current one, and the previous one until it
        expires (so that a server still on the old certificate is trusted across a renewal)."""
        now = now or dt.datetime.now(dt.timezone.utc)
        out = self.ca.cert_pem
        if self.previous_ca is not None and self.previous_ca.not_after > now:
            out += self.previous_ca.cert_pem
        return out

    def _write(self) -> None:
        # the key first and atomically: the server never reads a certificate without its key
        for path, data in ((self.keyfile, self.serving.key_pem),
                           (self.certfile, self.serving.cert_pem)):
            tmp = path.with_suffix(".tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)

    def renew(self, now: dt.datetime | None = None) -> bool:
        """Renew what is due (see the module doc); True when the CA bundle changed (it must be
        written to the webhook configuration before the new certificate is served)."""
        changed = False
        if self.ca.renew_due(CA_RENEW_AT, now):
            self.previous_ca = self.ca
            self.ca, self._ca_key = make_ca(now=now)
            changed = True
        if changed or self.serving.renew_due(SERVING_RENEW_AT, now):
            self.serving = make_serving(self.ca, self._ca_key, self.hosts, now=now)
        return changed

    def write_serving(self) -> None:
        self._write()


def patch_ca_bundle(admission_api, configuration: str, ca_bundle: bytes) -> int:
    """Write ``ca_bundle`` into every webhook of the MutatingWebhookConfiguration
    ``configuration`` (one JSON patch; the rest of it untouched). Returns how many webhooks."""
    current = admission_api.read_mutating_webhook_configuration(configuration)
    value = base64.b64encode(ca_bundle).decode("ascii")
    ops = [{"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": value}
           for i, _ in enumerate(current.webhooks or [])]
    if ops:
        admission_api.patch_mutating_webhook_configuration(configuration, ops)
    return len(ops)
