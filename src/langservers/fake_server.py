# A scriptable language server for the tests in tests.rs: deterministic versions of what real
# servers do (partial results, progress while loading, pull, requests to the client, crashes,
# hangs). argv: FLAGS LOGFILE, FLAGS comma-separated, some with =VALUE:
#   partial=S    publish the first diagnostic only, then all of them S seconds later
#   noversion    publish without a version (as typescript-language-server does)
#   stale        publish a bogus old version after each change
#   loading=S    report progress for S seconds after `initialized`; results meanwhile are empty
#   unloaded=S   load the project for S seconds after `initialized`: nothing published and
#                hovers partial ("partial: " and the line) meanwhile, as tsserver's are
#   pull         answer textDocument/diagnostic (static capability); pull=dynamic registers it
#   requests     send the client requests real servers send, log the answers
#   watch        register for workspace/didChangeWatchedFiles
#   crash=FILE   exit(3) on a document containing CRASH, if FILE exists (and remove FILE)
#   hang         never answer anything (not even initialize or shutdown)
#   stubborn     do not exit at the end of its input (nor on exit): only a kill ends it
#   child        start a `sleep` child (to test that the whole group goes)
#   setsid       start a `sleep` child in a session of its own (it leaves the process group)
#   crashopen    exit(3) on every didOpen
#   flood=N      publish N diagnostics for each document (a message of about N * 230 bytes)
#   name=NAME    call itself NAME in serverInfo (clangd's publishes count as complete)
#   repeat=S     publish each result again every S seconds, unchanged
#   encoding=E   answer positionEncoding E (utf-8, utf-32) although only utf-16 is offered,
#                and count columns in it
#   noread       stop reading its input after `initialized` (and stay alive)
#   huge         after `initialized`, announce a 100 MiB message (and stay alive)
#   orphan=FILE  on a document containing LEAVE, if FILE exists (and remove FILE): start a
#                `sleep` that keeps its pipes open, and exit(4)
# Each line containing ERR gets one diagnostic there, its column counted in UTF-16 units
# (or in `encoding`).
# Navigation, for the clients serve shares it with: textDocument/hover answers the text of the
# line asked about as the server has it (a line with SLOW 1 s later; with HANG only when
# cancelled, with -32800; with ASK after sending window/showMessageRequest and getting its
# answer, which becomes the hover's text); textDocument/definition the position asked about
# (on a line `GOTO PATH`, character 1 of line 0 of PATH);
# workspace/symbol one symbol per open document, named by its uri.
import json, os, subprocess, sys, threading, time

flags = dict(f.split("=", 1) if "=" in f else (f, "") for f in sys.argv[1].split(",") if f)
log = open(sys.argv[2], "a", buffering=1)
lock = threading.Lock()
docs = {}  # uri -> (text, version)
state = {"loading": "loading" in flags, "unloaded": "unloaded" in flags, "next_id": 1000}
held = {}  # id of a hover not answered yet -> its timer (SLOW) or None (HANG)
asked = {}  # id of a request to the client -> id of the hover waiting for its answer


def note(**kw):
    log.write(json.dumps(kw) + "\n")


def send(msg):
    msg["jsonrpc"] = "2.0"
    body = json.dumps(msg).encode()
    with lock:
        sys.stdout.buffer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        sys.stdout.buffer.flush()


def read():
    length = None
    while True:
        line = sys.stdin.buffer.readline()
        if not line:
            return None
        line = line.strip()
        if not line:
            break
        k, v = line.split(b":", 1)
        if k.strip().lower() == b"content-length":
            length = int(v)
    return json.loads(sys.stdin.buffer.read(length))


def request(method, params):
    state["next_id"] += 1
    send({"id": state["next_id"], "method": method, "params": params})


def diagnostics(text, upto=None):
    out = []
    if state["loading"]:
        return out
    for i, line in enumerate(text.split("\n")):
        j = line.find("ERR")
        if j >= 0:
            col = {"utf-8": len(line[:j].encode()), "utf-32": j}.get(
                flags.get("encoding"), len(line[:j].encode("utf-16-le")) // 2)
            out.append({"range": {"start": {"line": i, "character": col},
                                  "end": {"line": i, "character": col + 3}},
                        "severity": 1, "message": "bad ERR", "code": 7, "source": "fake"})
    return out if upto is None else out[:upto]


def publish(uri, version, items):
    p = {"uri": uri, "diagnostics": items}
    if "noversion" not in flags:
        p["version"] = version
    send({"method": "textDocument/publishDiagnostics", "params": p})
    if "repeat" in flags:
        def again():
            if docs.get(uri, (None, None))[1] == version:
                publish(uri, version, items)
        threading.Timer(float(flags["repeat"]), again).start()


def flood(uri, version, n):
    item = ('{"range": {"start": {"line": %d, "character": 0}, "end": {"line": %d, "character": 3}},'
            ' "severity": 2, "message": "flooded diagnostic number %d of many", "source": "fake"}')
    items = ",".join(item % (i, i, i) for i in range(n))
    body = ('{"jsonrpc": "2.0", "method": "textDocument/publishDiagnostics", "params": {"uri": %s,'
            ' "version": %d, "diagnostics": [%s]}}' % (json.dumps(uri), version, items)).encode()
    with lock:
        sys.stdout.buffer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        sys.stdout.buffer.flush()


def changed(uri):
    text, version = docs[uri]
    if state["unloaded"]:
        return
    if "flood" in flags:
        return flood(uri, version, int(flags["flood"]))
    if "crash" in flags and "CRASH" in text and os.path.exists(flags["crash"]):
        os.remove(flags["crash"])
        note(event="crash")
        os._exit(3)
    if "orphan" in flags and "LEAVE" in text and os.path.exists(flags["orphan"]):
        os.remove(flags["orphan"])
        note(event="orphan", pid=subprocess.Popen(["sleep", "1000"]).pid)
        os._exit(4)
    if "pull" in flags:
        return
    if "partial" in flags:
        publish(uri, version, diagnostics(text, 1))
        def later():
            if docs.get(uri, (None, None))[1] == version:
                publish(uri, version, diagnostics(text))
        threading.Timer(float(flags["partial"] or 0.15), later).start()
    else:
        publish(uri, version, diagnostics(text))
    if "stale" in flags:
        publish(uri, version - 1, [{"range": {"start": {"line": 0, "character": 0},
                                              "end": {"line": 0, "character": 1}},
                                    "message": "stale"}])


def end_unloaded():
    state["unloaded"] = False
    for uri in list(docs):
        changed(uri)


def end_loading():
    state["loading"] = False
    send({"method": "$/progress", "params": {"token": "load", "value": {"kind": "end"}}})
    for uri in list(docs):
        changed(uri)


if "child" in flags:
    note(event="child", pid=subprocess.Popen(["sleep", "1000"]).pid)
if "setsid" in flags:
    note(event="setsid", pid=subprocess.Popen(["sleep", "1000"], start_new_session=True).pid)

while True:
    msg = read()
    if msg is None:
        while "stubborn" in flags:
            time.sleep(1000)
        break
    note(got=msg)
    if "hang" in flags:
        continue
    method, params = msg.get("method"), msg.get("params") or {}
    if method == "initialize":
        caps = {"textDocumentSync": 1, "hoverProvider": True, "definitionProvider": True,
                "workspaceSymbolProvider": True}
        if flags.get("pull") == "":
            caps["diagnosticProvider"] = {"interFileDependencies": True, "workspaceDiagnostics": False}
        if "encoding" in flags:
            caps["positionEncoding"] = flags["encoding"]
        info = {"name": flags.get("name", "fake"), "version": "1.0"}
        send({"id": msg["id"], "result": {"capabilities": caps, "serverInfo": info}})
    elif method == "initialized":
        if "huge" in flags:
            with lock:
                sys.stdout.buffer.write(b"Content-Length: %d\r\n\r\n" % (100 << 20))
                sys.stdout.buffer.flush()
            while True:
                time.sleep(1000)
        if "noread" in flags:
            note(event="noread")
            while True:
                time.sleep(1000)
        if "requests" in flags:
            request("workspace/configuration", {"items": [{"section": "a"}, {"section": "b"}]})
            request("workspace/workspaceFolders", None)
            request("custom/unknown", {})
        if "unloaded" in flags:
            threading.Timer(float(flags["unloaded"]), end_unloaded).start()
        if "loading" in flags:
            request("window/workDoneProgress/create", {"token": "load"})
            send({"method": "$/progress", "params": {"token": "load",
                  "value": {"kind": "begin", "title": "Loading"}}})
            threading.Timer(float(flags["loading"]), end_loading).start()
        if flags.get("pull") == "dynamic":
            request("client/registerCapability", {"registrations": [
                {"id": "pull1", "method": "textDocument/diagnostic",
                 "registerOptions": {"identifier": "fakeid", "interFileDependencies": False,
                                     "workspaceDiagnostics": False}}]})
        if "watch" in flags:
            request("client/registerCapability", {"registrations": [
                {"id": "w1", "method": "workspace/didChangeWatchedFiles",
                 "registerOptions": {"watchers": [{"globPattern": "**/*"}]}}]})
    elif method == "textDocument/didOpen":
        if "crashopen" in flags:
            note(event="crash")
            os._exit(3)
        d = params["textDocument"]
        docs[d["uri"]] = (d["text"], d["version"])
        changed(d["uri"])
    elif method == "textDocument/didChange":
        d = params["textDocument"]
        docs[d["uri"]] = (params["contentChanges"][-1]["text"], d["version"])
        changed(d["uri"])
    elif method == "textDocument/didClose":
        docs.pop(params["textDocument"]["uri"], None)
    elif method == "textDocument/diagnostic":
        text, _ = docs[params["textDocument"]["uri"]]
        send({"id": msg["id"], "result": {"kind": "full", "items": diagnostics(text)}})
    elif method == "textDocument/hover":
        text, _ = docs[params["textDocument"]["uri"]]
        line = text.split("\n")[params["position"]["line"]]
        if state["unloaded"]:
            line = "partial: " + line
        answer = {"id": msg["id"], "result": {"contents": {"kind": "plaintext", "value": line}}}
        if "ASK" in line:
            request("window/showMessageRequest", {"type": 3, "message": line, "actions": []})
            asked[state["next_id"]] = msg["id"]
        elif "SLOW" in line or "HANG" in line:
            def late(answer=answer):
                if held.pop(answer["id"], 0) != 0:
                    send(answer)
            held[msg["id"]] = threading.Timer(1.0, late) if "SLOW" in line else None
            if held[msg["id"]]:
                held[msg["id"]].start()
        else:
            send(answer)
    elif method == "$/cancelRequest":
        timer = held.pop(params["id"], 0)
        if timer != 0:
            if timer:
                timer.cancel()
            send({"id": params["id"], "error": {"code": -32800, "message": "cancelled"}})
    elif method is None and msg.get("id") in asked:
        answer = msg.get("result", msg.get("error"))
        send({"id": asked.pop(msg["id"]), "result": {"contents": json.dumps(answer)}})
    elif method == "textDocument/definition":
        at = params["position"]
        uri = params["textDocument"]["uri"]
        text, _ = docs.get(uri, ("", 0))
        line = (text.split("\n") + [""])[at["line"]]
        if line.startswith("GOTO "):
            uri, at = "file://" + line[5:], {"line": 0, "character": 1}
        send({"id": msg["id"], "result": [{"uri": uri, "range": {"start": at, "end": at}}]})
    elif method == "workspace/symbol":
        at = {"line": 0, "character": 0}
        send({"id": msg["id"], "result": [
            {"name": u, "kind": 1, "location": {"uri": u, "range": {"start": at, "end": at}}}
            for u in sorted(docs)]})
    elif method == "shutdown":
        send({"id": msg["id"], "result": None})
    elif method == "exit":
        os._exit(0)
