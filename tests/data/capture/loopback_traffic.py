import socket, threading, time, sys
PORT = int(sys.argv[1])
def serve(fam, host):
    s = socket.socket(fam, socket.SOCK_STREAM); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, PORT)); s.listen(5)
    for _ in range(2):
        c, _ = s.accept()
        while True:
            d = c.recv(70000)
            if not d: break
            c.sendall(d[:100])
        c.close()
    s.close()
ts = [threading.Thread(target=serve, args=(socket.AF_INET, '127.0.0.1')), threading.Thread(target=serve, args=(socket.AF_INET6, '::1'))]
for t in ts: t.start()
time.sleep(0.3)
for fam, host in ((socket.AF_INET, '127.0.0.1'), (socket.AF_INET6, '::1')):
    for conn in range(2):
        c = socket.create_connection((host, PORT))
        for size in (8, 100, 1500, 9000, 12000, 3):
            c.sendall(b'AMQP\x00\x00\x09\x01' + bytes((i * 7) & 0xff for i in range(size)))
            c.recv(200); time.sleep(0.01)
        c.close()
    u = socket.socket(fam, socket.SOCK_DGRAM)
    for i in range(3): u.sendto(b'udp noise %d' % i, (host, PORT + 1))
time.sleep(0.2)
for t in ts: t.join()
