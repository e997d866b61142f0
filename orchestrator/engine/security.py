"""Who may talk to a cluster we start: TLS with a certificate made for that cluster alone.

Without it any process on the machine can connect to the embedded cluster's
scheduler and run code in its workers (Dask's comms are plain TCP by
default). Every cluster the orchestrator starts therefore gets a fresh
self-signed certificate and key (Dask's :meth:`Security.temporary
<distributed.security.Security.temporary>`); every connection — client,
scheduler, workers — proves it holds them, and is encrypted.

Other processes of the same user (a Parsl worker that contributes to a
stage, a second ``connect()``, ``dask worker`` under ``srun``) find the
credentials by the scheduler's address in a folder only that user can
read: ``$IORCH_CREDENTIALS_DIR``, else ``$XDG_CACHE_HOME/io-orchestrator/credentials``
(``~/.cache/…``): in the home folder, so the nodes of a Slurm allocation
see it. The files live as long as the cluster: closing it removes them.
:func:`load_credentials` is also a Dask *security loader*: set
``distributed.client.security-loader`` to
``orchestrator.engine.security.load_credentials`` and a plain
``distributed.Client("tls://…")`` finds them too.
"""

from __future__ import annotations

import logging
import os
import socket
import stat
from pathlib import Path
from typing import Any

from ..errors import ClusterError

log = logging.getLogger("orchestrator.engine.security")

__all__ = [
    "credentials_dir",
    "credentials_files",
    "load_credentials",
    "new_security",
    "publish_credentials",
    "withdraw_credentials",
]


def new_security() -> Any:
    """A new ``distributed.Security`` with its own certificate, encryption required.

    Examples
    --------
    >>> sec = new_security()
    >>> sec.require_encryption, sec.tls_ca_file.startswith("-----BEGIN CERTIFICATE")
    (True, True)
    """
    from distributed.security import Security

    try:
        return Security.temporary()
    except ImportError as err:  # `cryptography` is a dependency: only a broken install lacks it
        raise ClusterError(
            "cannot secure the cluster: the 'cryptography' package is missing "
            "(pip install cryptography), or pass security=False"
        ) from err


def credentials_dir(create: bool = False) -> Path:
    """The folder holding the credentials of this user's running clusters.

    ``$IORCH_CREDENTIALS_DIR`` if set, else
    ``$XDG_CACHE_HOME/io-orchestrator/credentials`` (``~/.cache`` by
    default). With ``create`` it is made with mode 0700; an existing one
    must be a real folder owned by this user that nobody else can enter
    (mode ``go-rwx``): otherwise :class:`~orchestrator.errors.ClusterError`.

    Examples
    --------
    >>> credentials_dir().name
    'credentials'
    """
    env = os.environ.get("IORCH_CREDENTIALS_DIR")
    if env:
        path = Path(env).absolute()  # the same folder for every process, whatever its cwd
    else:
        try:
            cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        except RuntimeError:  # no HOME and no passwd entry (some containers)
            raise ClusterError(
                "no home folder to keep the cluster's credentials in: set "
                "IORCH_CREDENTIALS_DIR, or pass security=False"
            ) from None
        path = Path(cache) / "io-orchestrator" / "credentials"
    if create:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:
            pass
    return path


def _checked_dir(path: Path) -> Path:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise ClusterError(f"credentials folder {path} does not exist") from None
    if not stat.S_ISDIR(st.st_mode):
        raise ClusterError(f"credentials folder {path} is not a folder (a symlink or a file)")
    if st.st_uid != os.getuid():
        raise ClusterError(f"credentials folder {path} belongs to uid {st.st_uid}, not to you")
    if st.st_mode & 0o077:
        raise ClusterError(
            f"credentials folder {path} has mode {stat.S_IMODE(st.st_mode):o}: "
            "other users could read the cluster's key (chmod 700 it)"
        )
    return path


def _stem(address: str) -> str:
    """``tls://10.0.0.5:40123`` → ``10.0.0.5_40123`` (a file name, whatever the address).

    A loopback address names the host too: two jobs on two nodes sharing a
    home folder may both listen on 127.0.0.1 with the same port.
    """
    where = address.split("://", 1)[-1]
    if where.startswith(("127.", "localhost", "0.0.0.0", "[::1]")):
        where = f"{socket.gethostname()}-{where}"
    return "".join(c if c.isalnum() or c in ".-" else "_" for c in where)


def credentials_files(address: str) -> tuple[Path, Path]:
    """The certificate and key files of the cluster at ``address`` (they may not exist).

    Examples
    --------
    >>> [p.name for p in credentials_files("tls://10.0.0.5:40123")]
    ['10.0.0.5_40123.crt', '10.0.0.5_40123.key']
    """
    base = credentials_dir() / _stem(address)
    return base.with_name(base.name + ".crt"), base.with_name(base.name + ".key")


def _write_private(path: Path, text: str) -> None:
    try:  # a leftover of a crashed run on a reused port: ours to replace (the folder is ours)
        path.unlink()
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def publish_credentials(address: str, security: Any) -> tuple[Path, Path]:
    """Write the certificate and key of the cluster at ``address`` for this user's processes.

    Files of mode 0600 in :func:`credentials_dir` (made 0700 if missing);
    returns their paths (``dask worker --tls-cert CRT --tls-key KEY
    --tls-ca-file CRT`` takes them as they are).

    Examples
    --------
    >>> crt, key = publish_credentials("tls://127.0.0.1:40123", new_security())  # doctest: +SKIP
    """
    try:
        _checked_dir(credentials_dir(create=True))
        crt, key = credentials_files(address)
        _write_private(crt, security.tls_client_cert)
        _write_private(key, security.tls_client_key)
    except OSError as err:  # a read-only home, a full disk: say where, and the ways out
        raise ClusterError(
            f"cannot write the cluster's credentials ({err}): set IORCH_CREDENTIALS_DIR "
            "to a folder of yours, or pass security=False"
        ) from None
    return crt, key


def withdraw_credentials(address: str, security: Any = None) -> None:
    """Remove the files :func:`publish_credentials` wrote for ``address`` (gone already: fine).

    With ``security``, only if they still hold its certificate: another
    cluster may have published under the same name since.

    Examples
    --------
    >>> withdraw_credentials("tls://127.0.0.1:1")
    """
    try:
        crt, key = credentials_files(address)
        if security is not None and crt.read_text() != security.tls_client_cert:
            return
    except (OSError, ClusterError):  # nothing there, or no folder at all
        return
    for path in (crt, key):
        try:
            path.unlink()
        except FileNotFoundError:
            pass


def load_credentials(address: str | dict[str, Any]) -> Any:
    """The ``distributed.Security`` to reach the cluster at ``address``; None if none is published.

    Accepts Dask's security-loader argument (``{"address": ...}``) as well.
    Only ``tls://`` addresses have credentials; the files are read now, so
    the result keeps working if the cluster's files are removed later.

    Examples
    --------
    >>> load_credentials("tcp://127.0.0.1:8786") is None
    True
    """
    addr = address["address"] if isinstance(address, dict) else address
    if not isinstance(addr, str) or not addr.startswith("tls://"):
        return None
    try:
        crt, key = credentials_files(addr)
    except ClusterError:  # no folder at all: Dask's own configuration may still serve
        return None
    if not crt.exists():
        return None
    _checked_dir(crt.parent)
    from distributed.security import Security

    try:
        cert, secret = crt.read_text(), key.read_text()
    except OSError as err:  # half-published, or withdrawn meanwhile
        raise ClusterError(f"credentials for {addr} are unreadable: {err}") from None
    return Security(
        require_encryption=True,
        tls_ca_file=cert,
        tls_client_cert=cert,
        tls_client_key=secret,
    )
