"""moto server, applying one request at a time.

moto (5.2.5) rolls a cancelled TransactWriteItems back by swapping whole tables for copies taken
when the transaction began, so a transaction that fails while another request writes the same
tables silently undoes that other request's writes. Real DynamoDB isolates transactions from each
other; serialising requests gives the local peer the same guarantee. Connections stay threaded
(keep-alive clients do not block each other); only the application runs under the lock.

Usage: python moto_serial.py -H 127.0.0.1 -p 5000
"""
import sys
import threading

import moto.server as server

_lock = threading.Lock()
_Dispatcher = server.DomainDispatcherApplication


class SerialDispatcher(_Dispatcher):
    def __call__(self, environ, start_response):
        with _lock:
            # Materialise the response inside the lock: moto builds it eagerly anyway.
            return list(super().__call__(environ, start_response))


server.DomainDispatcherApplication = SerialDispatcher

if __name__ == "__main__":
    server.main(sys.argv[1:])
