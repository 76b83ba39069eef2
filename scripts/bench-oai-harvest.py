"""OAI-PMH benchmark helper for scripts/bench-oai-harvest.sh: writes N oai_dc records as pre-rendered
ListRecords pages, serves them on 127.0.0.1, and times Sickle over them.

  bench-oai-harvest.py gen DIR N PER_PAGE CHANGED   pages for the full list (list-K.xml), and for the
                                            incremental list (incr-K.xml: CHANGED records,
                                            revised), plus Identify and ListMetadataFormats
  bench-oai-harvest.py serve DIR                    prints the port, then serves until killed
  bench-oai-harvest.py sickle URL N                 iterates ListRecords with Sickle; prints records/s

The server maps requests to files: a resumptionToken `list-K` or `incr-K` is the file of that
name; ListRecords with `from` is incr-0, without it list-0. Nothing is rendered per request,
so the harvester, not the server, is what is measured.
"""

import os
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

NS = ('xmlns="http://www.openarchives.org/OAI/2.0/" '
      'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"')
RESPONSE_DATE = "2026-01-10T12:00:00Z"


def envelope(inner):
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<OAI-PMH %s><responseDate>%s</responseDate>'
            '<request>http://127.0.0.1/oai</request>%s</OAI-PMH>\n' % (NS, RESPONSE_DATE, inner))


def record(i, revised):
    stamp = "2026-01-10T11:00:00Z" if revised else "2020-01-01T00:00:00Z"
    title = "Record %d%s" % (i, ", revised" if revised else "")
    return (
        '<record><header><identifier>oai:bench:%d</identifier><datestamp>%s</datestamp>'
        '<setSpec>set%d</setSpec></header><metadata>'
        '<oai_dc:dc xmlns:oai_dc="http://www.openarchives.org/OAI/2.0/oai_dc/" '
        'xmlns:dc="http://purl.org/dc/elements/1.1/" '
        'xsi:schemaLocation="http://www.openarchives.org/OAI/2.0/oai_dc/ '
        'http://www.openarchives.org/OAI/2.0/oai_dc.xsd">'
        '<dc:title>%s</dc:title><dc:creator>Author, A. %d</dc:creator>'
        '<dc:subject>Subject %d</dc:subject><dc:description>A description of record %d, '
        'long enough to look like an abstract of a scholarly work held in a repository.</dc:description>'
        '<dc:date>2019-%02d-01</dc:date><dc:type>Text</dc:type>'
        '<dc:identifier>http://repo.example/handle/%d</dc:identifier><dc:language>en</dc:language>'
        '</oai_dc:dc></metadata></record>'
        % (i, stamp, i % 10, title, i % 97, i % 13, i, i % 12 + 1, i))


def write_pages(d, name, ids, per_page, revised):
    pages = max(1, (len(ids) + per_page - 1) // per_page)
    for k in range(pages):
        chunk = ids[k * per_page:(k + 1) * per_page]
        token = ""
        if k + 1 < pages:
            token = '<resumptionToken cursor="%d" completeListSize="%d">%s-%d</resumptionToken>' % (
                k * per_page, len(ids), name, k + 1)
        elif pages > 1:
            token = '<resumptionToken cursor="%d" completeListSize="%d"/>' % (k * per_page, len(ids))
        body = "<ListRecords>%s%s</ListRecords>" % ("".join(record(i, revised) for i in chunk), token)
        with open(os.path.join(d, "%s-%d.xml" % (name, k)), "w") as f:
            f.write(envelope(body))


def gen(d, n, per_page, changed):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "identify.xml"), "w") as f:
        f.write(envelope(
            "<Identify><repositoryName>Bench</repositoryName><baseURL>http://127.0.0.1/oai</baseURL>"
            "<protocolVersion>2.0</protocolVersion><adminEmail>ops@example.org</adminEmail>"
            "<earliestDatestamp>2020-01-01T00:00:00Z</earliestDatestamp><deletedRecord>persistent</deletedRecord>"
            "<granularity>YYYY-MM-DDThh:mm:ssZ</granularity></Identify>"))
    with open(os.path.join(d, "formats.xml"), "w") as f:
        f.write(envelope(
            "<ListMetadataFormats><metadataFormat><metadataPrefix>oai_dc</metadataPrefix>"
            "<schema>http://www.openarchives.org/OAI/2.0/oai_dc.xsd</schema>"
            "<metadataNamespace>http://www.openarchives.org/OAI/2.0/oai_dc/</metadataNamespace>"
            "</metadataFormat></ListMetadataFormats>"))
    write_pages(d, "list", list(range(n)), per_page, False)
    step = max(1, n // max(1, changed))
    write_pages(d, "incr", list(range(0, n, step))[:changed], per_page, True)


def serve(d):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # TCP_NODELAY, as production servers (nginx, Apache) send: the handler writes the
        # headers and the body separately, and with Nagle a small body (Identify's) waits for
        # the client's delayed ACK, a 40 ms stall per small response that no harvester causes.
        disable_nagle_algorithm = True

        def do_GET(self):
            q = {k: v[0] for k, v in parse_qs(urlparse(self.path).query).items()}
            verb = q.get("verb")
            if verb == "Identify":
                name = "identify.xml"
            elif verb == "ListMetadataFormats":
                name = "formats.xml"
            elif "resumptionToken" in q:
                name = os.path.basename(q["resumptionToken"]) + ".xml"
            elif verb == "ListRecords":
                name = "incr-0.xml" if "from" in q else "list-0.xml"
            else:
                name = ""
            path = os.path.join(d, name)
            if not name or not os.path.exists(path):
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            with open(path, "rb") as f:
                body = f.read()
            self.send_response(200)
            self.send_header("Content-Type", "text/xml; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(httpd.server_port, flush=True)
    httpd.serve_forever()


def sickle(url, n):
    from sickle import Sickle
    t = time.perf_counter()
    count = sum(1 for _ in Sickle(url).ListRecords(metadataPrefix="oai_dc"))
    secs = time.perf_counter() - t
    if count != n:
        sys.exit("sickle: %d records, expected %d" % (count, n))
    print("%.0f %.3f" % (n / secs, secs))


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "gen":
        gen(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    elif cmd == "serve":
        serve(sys.argv[2])
    elif cmd == "sickle":
        sickle(sys.argv[2], int(sys.argv[3]))
