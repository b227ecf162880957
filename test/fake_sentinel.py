#!/usr/bin/python3
"""A sentinel that lies: it answers SENTINEL get-master-addr-by-name with
the address it is given (a replica, for the tests), +OK to anything else.
With LOG, every command it gets is appended there, one per line (so a test
can see what a client sent to a server a sentinel named: as a master that
is not one, ROLE gets +OK).
Usage: fake_sentinel.py PORT MASTER_HOST MASTER_PORT [LOG] (runs until
killed)."""
import socket
import sys
import threading


def serve(conn, host, port, log):
    f = conn.makefile('rb')
    try:
        while True:
            line = f.readline()
            if not line:
                return
            if not line.startswith(b'*'):
                continue
            args = []
            for _ in range(int(line[1:])):
                n = int(f.readline()[1:])
                args.append(f.read(n + 2)[:-2])
            if log:
                with open(log, 'ab') as out:
                    out.write(b' '.join(args) + b'\n')
            if len(args) >= 2 and args[1].lower() == b'get-master-addr-by-name':
                h, p = host.encode(), str(port).encode()
                conn.sendall(b'*2\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n' % (len(h), h, len(p), p))
            else:
                conn.sendall(b'+OK\r\n')
    finally:
        conn.close()


def main():
    lport, host, port = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    log = sys.argv[4] if len(sys.argv) > 4 else None
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(('127.0.0.1', lport))
    s.listen(64)
    while True:
        c, _ = s.accept()
        threading.Thread(target=serve, args=(c, host, port, log), daemon=True).start()


main()
