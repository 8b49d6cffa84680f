#!/usr/bin/env bash
# Prints a free port PORT on 127.0.0.1 whose PORT+1 is free too: start.sh's client and
# controller listeners.
exec python3 -c 'import socket
for _ in range(50):
    a, b = socket.socket(), socket.socket()
    try:
        a.bind(("127.0.0.1", 0)); p = a.getsockname()[1]; b.bind(("127.0.0.1", p + 1)); print(p); break
    except OSError: pass
    finally: a.close(); b.close()'
