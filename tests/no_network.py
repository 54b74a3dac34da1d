"""Runs the appliance CLI with an audit hook that records every network socket.

Usage: python tests/no_network.py LOGFILE appliance-arguments...
Unix-domain sockets (asyncio's internal wake-up pipe) are allowed; any
AF_INET/AF_INET6 socket, connect, bind or name lookup is written to LOGFILE.
"""

from __future__ import annotations

import socket
import sys
from typing import Any

LOG_PATH = sys.argv[1]
NETWORK_FAMILIES = {socket.AF_INET, socket.AF_INET6}


def _record(event: str, args: tuple[Any, ...]) -> None:
    with open(LOG_PATH, "a", encoding="utf-8") as log:
        log.write(f"{event} {args!r}\n")


def _hook(event: str, args: tuple[Any, ...]) -> None:
    new_network_socket = event == "socket.__new__" and args[1] in NETWORK_FAMILIES
    network_address = event in ("socket.connect", "socket.bind", "socket.sendto") and not isinstance(
        args[1], str | bytes
    )
    if new_network_socket or network_address:
        _record(event, args[1:])
    elif event in ("socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr"):
        _record(event, args)


sys.addaudithook(_hook)
open(LOG_PATH, "w").close()
sys.argv = ["appliance", *sys.argv[2:]]

from appliance.cli.main import main  # noqa: E402

main()
