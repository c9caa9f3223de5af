#!/usr/bin/python3
"""s3fault: an HTTP proxy in front of an S3 gateway that fails on purpose.

    s3fault.py UPSTREAM_URL PORTFILE [--every N] [--delay S]

Listens on 127.0.0.1 (a free port, written to PORTFILE), forwards each
request unchanged (the Host header too, so SigV4 signatures still hold) to
UPSTREAM_URL, and answers every Nth request itself with 503 SlowDown or
500 InternalError (a line each on stderr), after reading its body. --delay
holds every forwarded reply S seconds (a slow gateway). Counts go to
stderr at exit. For tests of the remote tier's retries.
"""
import argparse
import http.client
import http.server
import os
import signal
import sys
import threading
import time
import urllib.parse

HOP = {"connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("upstream")
    ap.add_argument("portfile")
    ap.add_argument("--every", type=int, default=3)
    ap.add_argument("--delay", type=float, default=0.0)
    a = ap.parse_args()
    up = urllib.parse.urlsplit(a.upstream)
    lock = threading.Lock()
    count = {"n": 0, "failed": 0}

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def body(self):
            n = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(n) if n else b""

        def fail(self, code):
            word = "SlowDown" if code == 503 else "InternalError"
            msg = ("<?xml version=\"1.0\"?><Error><Code>%s</Code></Error>" % word).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(msg)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(msg)

        def forward(self):
            data = self.body()
            with lock:
                count["n"] += 1
                n = count["n"]
                bad = a.every > 0 and n % a.every == 0
                if bad:
                    count["failed"] += 1
                    code = 503 if count["failed"] % 2 else 500
            if bad:
                sys.stderr.write("s3fault: %d on %s %s\n" % (code, self.command, self.path))
                sys.stderr.flush()
                self.fail(code)
                return
            c = http.client.HTTPConnection(up.hostname, up.port or 80, timeout=120)
            c.putrequest(self.command, self.path, skip_host=True, skip_accept_encoding=True)
            for k, v in self.headers.items():
                if k.lower() not in HOP and k.lower() != "expect":
                    c.putheader(k, v)
            c.endheaders(data)
            r = c.getresponse()
            payload = r.read()
            if a.delay:
                time.sleep(a.delay)
            self.send_response(r.status, r.reason)
            length = str(len(payload))
            for k, v in r.getheaders():
                if k.lower() == "content-length" and self.command == "HEAD":
                    length = v  # the object's size, with no body
                elif k.lower() not in HOP and k.lower() != "content-length":
                    self.send_header(k, v)
            self.send_header("Content-Length", length)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)
            c.close()

        do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = forward

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(a.portfile + ".tmp", "w") as f:
        f.write("%d\n" % srv.server_address[1])
    os.rename(a.portfile + ".tmp", a.portfile)
    def stop(*_):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        sys.stderr.write("s3fault: %d requests, %d failed\n" % (count["n"], count["failed"]))


if __name__ == "__main__":
    main()
