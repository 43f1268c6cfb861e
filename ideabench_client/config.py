"""Where the client finds its server and key: arguments, then ``IDEABENCH_URL`` /
``IDEABENCH_KEY``, then the config file ``ideabench login`` writes (mode 0600)."""

from __future__ import annotations

import json
import os
from pathlib import Path

URL_ENV = "IDEABENCH_URL"
KEY_ENV = "IDEABENCH_KEY"
CONFIG_ENV = "IDEABENCH_CONFIG"  # another config file (tests, several servers)
DEFAULT_URL = "http://127.0.0.1:8000"


def config_path() -> Path:
    """``$IDEABENCH_CONFIG``, else ``$XDG_CONFIG_HOME/ideabench/config.json`` (``~/.config``)."""
    if os.environ.get(CONFIG_ENV):
        return Path(os.environ[CONFIG_ENV])
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "ideabench" / "config.json"


def _file() -> dict[str, str]:
    try:
        data = json.loads(config_path().read_text())
    except (OSError, ValueError):
        return {}
    return {k: str(v) for k, v in data.items() if k in ("url", "key")} if isinstance(data, dict) else {}


def resolve(url: str | None = None, key: str | None = None) -> tuple[str, str | None]:
    """The server URL and API key to use."""
    stored = _file()
    url = url or os.environ.get(URL_ENV) or stored.get("url") or DEFAULT_URL
    key = key or os.environ.get(KEY_ENV) or stored.get("key")
    return url.rstrip("/"), key


def save(url: str, key: str) -> Path:
    """Write the config file, readable by its owner only; returns its path."""
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"url": url.rstrip("/"), "key": key}, fh)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
    return path
