#!/usr/bin/env python3
# A TCP proxy on loopback for t/036: each client connection gets its own
# upstream connection. Told so (a file "hold" in the control directory), it
# holds back what the clients of the connections open at that moment send,
# and keeps their upstream connections open after the clients close them;
# told "flush", it sends what it held on those upstream connections: bytes
# that reach the server late, after their sender gave up on them. What
# the server answers on a connection whose client has gone (the answers to
# those late bytes) is appended to the file "late" there. Files "hold" and
# "flush" are removed once acted on.
# Usage: holdproxy.py listen_port upstream_port dir
import os, select, socket, sys, time

listen_port, up_port, ctl = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
lsock = socket.socket()
lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
lsock.bind(('127.0.0.1', listen_port))
lsock.listen(16)
pairs = []   # dicts: client, up, held (bytes or None), closing time
open(os.path.join(ctl, 'ready'), 'w').close()

def close(s):
    try:
        s.close()
    except OSError:
        pass

while True:
    socks = [lsock] + [p['client'] for p in pairs if p['client']] + \
        [p['up'] for p in pairs if p['up']]
    r, _, _ = select.select(socks, [], [], 0.05)
    for s in r:
        if s is lsock:
            c, _ = lsock.accept()
            u = socket.create_connection(('127.0.0.1', up_port))
            pairs.append({'client': c, 'up': u, 'held': None})
            continue
        for p in pairs:
            if s is p['client']:
                data = s.recv(65536)
                if not data:
                    close(s)
                    p['client'] = None
                    if p['held'] is None:
                        close(p['up'])
                        p['up'] = None
                elif p['held'] is not None:
                    p['held'] += data
                else:
                    p['up'].sendall(data)
            elif s is p['up']:
                try:
                    data = s.recv(65536)
                except OSError:
                    data = b''
                if not data:
                    close(s)
                    p['up'] = None
                    if p['client']:
                        close(p['client'])
                        p['client'] = None
                elif p['client']:
                    p['client'].sendall(data)
                else:
                    with open(os.path.join(ctl, 'late'), 'ab') as f:
                        f.write(data)
    pairs = [p for p in pairs if p['client'] or p['up']]
    f = os.path.join(ctl, 'hold')
    if os.path.exists(f):
        for p in pairs:
            p['held'] = b''
        os.unlink(f)
    f = os.path.join(ctl, 'flush')
    if os.path.exists(f):
        for p in pairs:
            if p['held'] is not None and p['up']:
                try:
                    p['up'].sendall(p['held'])
                except OSError:
                    pass
                p['held'] = None
        os.unlink(f)
