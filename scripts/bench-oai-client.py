"""The client of scripts/bench-oai-serve.sh: pages through a whole ListRecords over one keep-alive
connection, as a harvester does, and prints bytes, seconds, pages and records as JSON.

  bench-oai-client.py oai HOST PORT PATH [SAVE_DIR]   follow resumption tokens from PATH?verb=…
  bench-oai-client.py static HOST PORT PAGES          GET /page-0000.xml … in order (nginx)
"""

import http.client
import json
import os
import re
import sys
import time
import urllib.parse

TOKEN = re.compile(rb"<resumptionToken[^>]*>([^<]+)</resumptionToken>")


def get(conn, path):
    conn.request("GET", path)
    r = conn.getresponse()
    body = r.read()
    if r.status != 200:
        raise SystemExit("%s: HTTP %d" % (path, r.status))
    return body


def oai(conn, path, save):
    query = "?verb=ListRecords&metadataPrefix=oai_dc"
    total = pages = records = 0
    start = time.monotonic()
    while True:
        body = get(conn, path + query)
        total += len(body)
        records += body.count(b"<record>")
        if save:
            with open(os.path.join(save, "page-%04d.xml" % pages), "wb") as f:
                f.write(body)
        pages += 1
        m = TOKEN.search(body, max(0, len(body) - 4096))
        if not m:
            break
        query = "?verb=ListRecords&resumptionToken=" + urllib.parse.quote(m.group(1).decode())
    return total, time.monotonic() - start, pages, records


def static(conn, pages):
    total = records = 0
    start = time.monotonic()
    for i in range(pages):
        body = get(conn, "/page-%04d.xml" % i)
        total += len(body)
        records += body.count(b"<record>")
    return total, time.monotonic() - start, pages, records


def main():
    mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    conn = http.client.HTTPConnection(host, port, timeout=600)
    if mode == "oai":
        save = sys.argv[5] if len(sys.argv) > 5 else None
        result = oai(conn, sys.argv[4], save)
    else:
        result = static(conn, int(sys.argv[4]))
    b, s, p, r = result
    print(json.dumps({"bytes": b, "seconds": round(s, 3), "pages": p, "records": r, "bytes_per_s": round(b / s)}))


if __name__ == "__main__":
    main()
