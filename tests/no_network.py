"""Runs the appliance CLI with an audit hook that records every network socket.

Usage: python tests/no_network.py LOGFILE appliance-arguments...
Unix-domain sockets (asyncio's internal wake-up pipe) are allowed, and so is binding an
AF_INET/AF_INET6 socket to a loopback address (vLLM's single-process torch group listens on ::1,
which no other machine can reach). Any other bind, any connect or send to an internet address,
and any name lookup is written to LOGFILE.
"""

from __future__ import annotations

import ipaddress
import sys
from typing import Any

LOG_PATH = sys.argv[1]


def _record(event: str, args: tuple[Any, ...]) -> None:
    with open(LOG_PATH, "a", encoding="utf-8") as log:
        log.write(f"{event} {args!r}\n")


def _loopback(address: Any) -> bool:
    try:
        return ipaddress.ip_address(str(address[0])).is_loopback
    except (ValueError, IndexError, TypeError):
        return False


def _hook(event: str, args: tuple[Any, ...]) -> None:
    internet_address = event in ("socket.connect", "socket.bind", "socket.sendto") and not isinstance(
        args[1], str | bytes
    )
    if internet_address and not (event == "socket.bind" and _loopback(args[1])):
        _record(event, args[1:])
    elif event in ("socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr"):
        _record(event, args)


sys.addaudithook(_hook)
open(LOG_PATH, "w").close()
sys.argv = ["appliance", *sys.argv[2:]]

from appliance.cli.main import main  # noqa: E402

main()
