#!/usr/bin/python3
"""Writes the hand-made seeds of fuzz/corpus/<target>/ (fuzz/README.md).

Each seed is a small, meaningful input: a well-formed message of the decoder's
protocol, or one that hits a particular refusal; regress_* ones are the inputs
of bugs fuzzing found (fixed). Seeds found by fuzzing live beside them (named
by their SHA-1, as libFuzzer names them, or regress_* when they were a crash).
Run from anywhere:
    /usr/bin/python3 fuzz/make_seeds.py
It only (re)writes the files named here; existing files are left alone.
"""
import base64
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def js(o):
    return json.dumps(o, separators=(",", ":"))


def frame(payload):
    if isinstance(payload, (dict, list)):
        payload = js(payload)
    if isinstance(payload, str):
        payload = payload.encode()
    return struct.pack(">I", len(payload)) + payload


PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 24).decode()

# --- json_depth: raw text --------------------------------------------------
put("json_depth", "object", '{"type":"hello","protocol":1}')
put("json_depth", "nested_64", "[" * 64 + "]" * 64)
put("json_depth", "nested_65", "[" * 65 + "]" * 65)
put("json_depth", "brackets_in_strings", '{"a":"[[[{{{","b":["\\"[",{"c":"\\\\"}]}')
put("json_depth", "unbalanced", "]]]}}[[{")
put("json_depth", "escaped_quote_end", '["\\\\\\"]", [[1]]]')
put("json_depth", "not_json", "not json at all {")

# --- frame: mode byte, chunk byte, stream ------------------------------------
hello = frame({"type": "hello", "protocol": 1})
result = frame({"type": "execute_result", "cell": 0, "execution_count": 1,
                "data": {"text/plain": "2"}, "metadata": {}})
put("frame", "hello_whole", b"\x00\x00" + hello)
put("frame", "two_frames_bytewise", b"\x00\x01" + hello + result)
put("frame", "chunks_of_3_truncated", b"\x00\x03" + hello + result[:-5])
put("frame", "over_small_limit", b"\x04\x00" + frame({"type": "x", "pad": "x" * 40}))
put("frame", "announced_4g", b"\x00\x07" + b"\xff\xff\xff\xff" + b"{}")
put("frame", "after_1mib_frame", b"\xff\x05" + result + hello)
put("frame", "not_object", b"\x00\x00" + frame("[1,2]") + frame('{"type":3}') + frame("{}"))
put("frame", "string_map_members", b"\x00\x00" + frame(
    {"type": "display_data", "cell": 0, "data": {"image/png": PNG, "text/plain": "<Figure>"},
     "metadata": {"a": 1}}))

# --- cell_outputs: mode byte, then lines (\x01 stdout, \x02 stderr, else a frame) ---
def cell(mode, *lines):
    return bytes([mode]) + b"\n".join(l.encode() if isinstance(l, str) else l for l in lines)

reply_ok = js({"type": "execute_reply", "cell": 0, "status": "ok", "execution_count": 1})
put("cell_outputs", "print_and_value", cell(
    0, "\x01hello", "\x01 world", "\x02warn", js({"type": "sync", "cell": 0}),
    js({"type": "execute_result", "cell": 0, "execution_count": 1,
        "data": {"text/plain": "42", "text/html": "<b>42</b>"}, "metadata": {}}),
    reply_ok))
put("cell_outputs", "figures_over_caps", cell(
    0x05, *[js({"type": "display_data", "cell": 0, "data": {"image/png": PNG,
                                                             "text/plain": "<Figure>"}})] * 3,
    js({"type": "execute_reply", "cell": 0, "status": "ok", "execution_count": 1, "dropped": 2})))
put("cell_outputs", "traceback", cell(
    0, js({"type": "error", "cell": 0, "ename": "ZeroDivisionError", "evalue": "division by zero",
           "traceback": ["Traceback (most recent call last):", "ZeroDivisionError: division by zero"]}),
    js({"type": "execute_reply", "cell": 0, "status": "error", "execution_count": 1})))
put("cell_outputs", "policy_violation", cell(
    0, js({"type": "policy_violation", "cell": 0, "module": "os", "line": 1,
           "message": "import of 'os' is not allowed"}),
    js({"type": "execute_reply", "cell": 0, "status": "policy_violation", "execution_count": None})))
put("cell_outputs", "exit_code", cell(
    0x40, "\x01bye", js({"type": "execute_reply", "cell": 7, "status": "exit", "exit_code": 3})))
put("cell_outputs", "frame_after_reply", cell(0, reply_ok, js({"type": "display_data", "cell": 0,
                                                               "data": {"text/plain": "late"}})))
put("cell_outputs", "wrong_cell", cell(0, js({"type": "display_data", "cell": 1, "data": {}})))
put("cell_outputs", "small_budget", cell(0x10, "\x01" + "x" * 30, js(
    {"type": "display_data", "cell": 0, "data": {"text/plain": "y" * 80}}), reply_ok))
put("cell_outputs", "bad_members", cell(0, js({"type": "execute_reply", "cell": 0, "status": "ok",
                                               "dropped": -1})))
put("cell_outputs", "unknown_status", cell(0, js({"type": "execute_reply", "cell": 0, "status": "meh"})))
# The runtime's dropped count wrapped kiln's own to 0.
put("cell_outputs", "regress_dropped_wraps", cell(
    0, js({"type": "display_data", "cell": 0, "data": {"image/png": "iVBORw0KGgo="}}),
    '{"type":"execute_reply","cell":0,"status":"ok","dropped":18446744073709551615}'))

# --- setup_record: shape byte (fds | 0x10 credentials | 0x20 hang up), record ---
def sync(tag, step=0, err=0, detail=-1, status=0):
    return struct.pack("<cBHiii", tag.encode(), step, 0, err, detail, status)

put("setup_record", "workspace_fd", b"\x01" + sync("D"))
put("setup_record", "worker_started", b"\x10" + sync("W"))
put("setup_record", "worker_exited", b"\x00" + sync("X", status=3 << 8))
put("setup_record", "failure_mount", b"\x00" + sync("F", step=11, err=2, detail=3))
put("setup_record", "failure_unknown_step", b"\x20" + sync("F", step=250, err=99999))
put("setup_record", "maps_written_from_sandbox", b"\x00" + sync("M"))
put("setup_record", "short", b"\x00" + sync("W")[:7])
put("setup_record", "long_with_fds", b"\x0f" + sync("D") + b"extra")
put("setup_record", "regress_empty_record_with_fd", b"\x01")

# --- pool_handoff: shape byte, HandoffRecord (magic, pids, uid, profile[64], cgroup[96]) ---
def handoff(magic=0x6b7a7931, profile=b"default", cgroup=b"kiln-pool-default-1"):
    return struct.pack("<Iiii64s96s", magic, 100, 101, 1000, profile, cgroup)

put("pool_handoff", "ready_sandbox", b"\x06" + handoff())
put("pool_handoff", "names_without_nul", b"\x06" + handoff(profile=b"p" * 64, cgroup=b"c" * 96))
put("pool_handoff", "bad_magic", b"\x06" + handoff(magic=1))
put("pool_handoff", "five_fds", b"\x05" + handoff())
put("pool_handoff", "nine_fds", b"\x19" + handoff())
put("pool_handoff", "short", b"\x06" + handoff()[:40])
put("pool_handoff", "empty_hang_up", b"\x20")

# StatusRecord (magic "kzyS", profile[64], refilling, target, zygote_ready,
# reserved, 4 padding bytes, refills, failures, zygote_starts, refill ms total, last)
def status(magic=0x6b7a7953, profile=b"default", ready=1, total=1234.5, last=40.25):
    return struct.pack("<I64sIIII4xQQQdd", magic, profile, 2, 4, ready, 0, 30, 1, 1, total, last)

put("pool_handoff", "status", b"\x00" + status())
put("pool_handoff", "status_with_fd", b"\x01" + status())
put("pool_handoff", "status_nan_time", b"\x00" + status(total=float("nan")))
put("pool_handoff", "status_negative_time", b"\x00" + status(last=-1.0))
put("pool_handoff", "status_ready_flag_2", b"\x00" + status(ready=2))
put("pool_handoff", "status_no_profile", b"\x00" + status(profile=b""))
put("pool_handoff", "status_short", b"\x00" + status()[:100])

# --- job_request: the first frame's payload on a job socket (a plan) -----------
policy = {"limits": {"wall_timeout_s": 2.5, "cpu_time_s": 2.5, "cpu_time_explicit": False,
                     "memory_bytes": 67108864, "cpus": 0.5, "pids": 32, "output_bytes": 1048576,
                     "workspace_bytes": 134217728, "tmp_bytes": 67108864, "shm_bytes": 67108864,
                     "open_files": 1024, "io_read_bps": 268435456, "io_write_bps": 134217728,
                     "io_read_iops": 8000, "io_write_iops": 4000},
          "interpreter": "/usr/bin/python3", "input_files": [], "cgroup": "required",
          "landlock": "required", "hostname": "kiln",
          "imports": {"mode": "denylist", "modules": ["socket", "os.path"]},
          "preload": ["numpy"], "max_images": 16, "max_image_bytes": 8388608,
          "ro_mounts": [], "backend": "native"}
req = {"type": "execute", "id": "e1", "profile": "default", "policy": policy, "pooled": True,
       "code": "print(1)", "filename": "<cell>", "return_files": ["*.png"], "stream": True,
       "env": {"MY_VAR": "x"}, "fds": 0}
put("job_request", "plan_execute", js(req))
put("job_request", "plan_execute_minimal", js({"type": "execute", "id": "", "profile": "default",
                                               "code": "1", "filename": "<string>",
                                               "policy": policy}))
put("job_request", "plan_file_without_fd", js(dict(req, fds=1, policy=dict(
    policy, input_files=[{"name": "data/a.bin", "fd": 0, "size": 3}]))))
put("job_request", "plan_cli_file", js(dict(req, policy=dict(
    policy, input_files=[{"name": "a.csv", "host_path": "/etc/hostname"}]))))
put("job_request", "plan_env_not_strings", js(dict(req, env={"A": 1})))
put("job_request", "plan_limit_of_another_type", js(dict(req, policy=dict(
    policy, limits=dict(policy["limits"], pids="32")))))
put("job_request", "plan_gvisor_best_effort", js(dict(req, policy=dict(
    policy, backend="gvisor", cgroup="best_effort"))))
put("job_request", "session_plan", js({
    "type": "session_start", "id": "s1", "profile": "datascience", "policy": policy,
    "pooled": False, "env": {"FOO": "bar"}, "max_lifetime_s": 120, "interrupt_grace_s": 0.5,
    "max_file_bytes": 1234, "fds": 0}))
put("job_request", "session_plan_odd_types", js({
    "type": "session_start", "id": "s2", "profile": "p", "policy": [], "max_file_bytes": -1}))

# --- job_result: mode byte, the result frame's payload, NUL, the memfd's bytes --
phases = {k: 0.5 for k in ("plan", "cgroup", "clone", "maps", "child_setup", "exec", "attach",
                           "start", "run", "teardown")}
result = {"status": "ok", "exit_code": 0, "signal": None, "stdout": "hi\n", "stderr": "",
          "stdout_truncated": False, "stderr_truncated": False, "duration_ms": 12.5,
          "cpu_ms": 3.0, "peak_memory_bytes": 1048576, "oom_kills": 0, "pids_limit_hits": 0,
          "limits_backend": "cgroup-v2", "reason": "", "outputs": [{"type": "text", "text": "2"}],
          "execution_count": 1, "error": None, "outputs_dropped": 0, "outputs_truncated": False,
          "phases_ms": phases}
res = {"type": "result", "result": result}
two = dict(res, files=[{"path": "a.txt", "size": 3}, {"path": "d/b.bin", "size": 4}], fds=1)


def job_result(mode, message, memfd=b""):
    return bytes([mode]) + js(message).encode() + b"\0" + memfd


put("job_result", "result_plain", job_result(0, res))
put("job_result", "result_two_files", job_result(1, two, b"abc\x00\x01\xff\x7f"))
put("job_result", "result_sizes_do_not_add_up", job_result(1, two, b"abcdefgh"))
put("job_result", "result_files_without_memfd", job_result(0, two))
put("job_result", "result_unsealed_memfd", job_result(3, two, b"abcdefg"))
put("job_result", "result_memfd_without_files", job_result(1, res, b"x"))
put("job_result", "result_negative_size", job_result(1, dict(two, files=[{"path": "a", "size": -1}]), b""))
put("job_result", "result_error_and_violation", job_result(0, dict(res, result=dict(
    result, status="error", exit_code=1, error={"name": "ValueError", "value": "x",
                                                  "traceback": ["tb"]},
    policy_violation={"module": "socket", "line": 1, "message": "blocked"},
    setup_error={"step": "landlock", "errno": 1, "errno_name": "EPERM", "message": "m"},
    session_state="alive", files_skipped=["a: why"], collect_error="c"))))
put("job_result", "result_mistyped_member", job_result(0, dict(res, result=dict(
    result, cpu_ms="3"))))

# --- http_request: one body for the four parsers ------------------------------
bodies = {
    "v1_every_field": {"code": "print(1)", "timeout": 2.5, "memory": "256m", "cpus": 0.5,
                       "profile": "strict",
                       "files": [{"path": "data/a.txt", "content": "hi"},
                                 {"path": "b.bin", "content_base64": "AAEC"}],
                       "return_files": ["*.png"], "env": {"MY_VAR": "x"}, "filename": "main.py"},
    "v1_bad_path": {"code": "1", "files": [{"path": "../etc/passwd", "content": "x"}]},
    "v1_reserved_env": {"code": "1", "env": {"LD_PRELOAD": "x", "OMP_NUM_THREADS": "2"}},
    "v1_return_files_true": {"code": "1", "return_files": True, "memory": 1073741824},
    "reference": {"code": "x", "timeout": 5, "mem_limit": "512m", "cpu_limit": 0.5,
                  "input_files": {"a.txt": "hi"}, "return_output_files": True, "extra": 1},
    "reference_limits": {"code": "1", "timeout": 301, "cpu_limit": 0.05, "mem_limit": "8m"},
    "session_create": {"profile": "strict", "memory": "64m", "cpus": 0.5, "timeout": 5,
                       "idle_ttl": 60, "max_lifetime": 600},
    "session_execute": {"code": "x = 1", "timeout": 2.5},
}
for name, body in bodies.items():
    put("http_request", name, js(body))
put("http_request", "empty", "")
put("http_request", "not_json", "{\"code\": ")
put("http_request", "too_deep", '{"code":"1","env":' + "[" * 70 + "]" * 70 + "}")
put("http_request", "unicode_code", js({"code": "print('\u00e9\u4e2d\U0001F600')"}))

# --- workspace_path: the path as it appears in the URL ------------------------
for i, p in enumerate(["a.txt", "dir/b.txt", "dir/sub/c", "rel", "abs", "outdir/secret",
                       "dir/up/a.txt", "dir/sub/deep", "magic", "fifo", "%2e%2e/outside/secret",
                       "dir%2fb.txt", "a%00b", "data/a%20b.csv", "%", "%4", "%zz", "/etc/passwd",
                       "a//b", "./a.txt", "dir/", "x" * 256, "/".join(["d"] * 17)]):
    put("workspace_path", "path_%02d" % i, p)

# --- mcp_engine: mode byte, then one JSON-RPC message per line -----------------
def rpc(id_, method, params=None):
    m = {"jsonrpc": "2.0", "method": method}
    if id_ is not None:
        m["id"] = id_
    if params is not None:
        m["params"] = params
    return js(m)

def tool(id_, name, args, meta=None):
    p = {"name": name, "arguments": args}
    if meta is not None:
        p["_meta"] = meta
    return rpc(id_, "tools/call", p)

init = rpc(0, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                             "clientInfo": {"name": "fuzz", "version": "1"}})
inited = rpc(None, "notifications/initialized")

def session(mode, *lines):
    return bytes([mode]) + "\n".join((init, inited) + lines).encode()

put("mcp_engine", "lifecycle", session(1, rpc(1, "ping"), rpc(2, "tools/list"), rpc(3, "nope")))
put("mcp_engine", "run_python", session(1, tool(1, "run_python", {"code": "print(1)", "timeout": 5},
                                                {"progressToken": "p1"}),
                                        tool(2, "run_python", {"code": "lost"}),
                                        tool(3, "run_python", {"code": "x"}),
                                        tool(4, "run_python", {"code": "gone"}),
                                        tool(5, "run_python", {"code": "busy"})))
put("mcp_engine", "files", session(1, tool(1, "upload_file", {"path": "/workspace/a.csv",
                                                             "content_base64": "YSxiCjEsMgo="}),
                                   tool(2, "upload_file", {"path": "img.png",
                                                           "content_base64": PNG}),
                                   tool(3, "list_files", {}), tool(4, "download_file", {"path": "a.csv"}),
                                   tool(5, "download_file", {"path": "img.png"}),
                                   tool(6, "download_file", {"path": "missing"}),
                                   tool(7, "reset", {}), tool(8, "list_files", {})))
put("mcp_engine", "result_shapes", session(1, tool(1, "run_python", {"code": js({
    "status": "error", "stdout": "out", "stderr": "err", "stdout_truncated": True,
    "outputs": [{"output_type": "stream", "name": "stderr", "text": ["a", "b"]},
                {"output_type": "execute_result", "execution_count": 3, "data": {"text/plain": "3"}},
                {"output_type": "display_data", "data": {"image/png": PNG}},
                {"output_type": "error", "ename": "E", "evalue": "v", "traceback": ["tb"]}],
    "error": {"name": "E", "value": "v"}, "outputs_dropped": 2, "session_state": "lost"})}),
    tool(2, "run_python", {"code": js({"status": "timeout", "reason": "30 s", "exit_code": 124})})))
put("mcp_engine", "listing_shapes", session(1, tool(1, "upload_file", {"path": ".listing",
    "content_base64": base64.b64encode(js({"files": [{"path": "d", "directory": True},
                                                     {"path": "f", "size": 3}, 7]}).encode()).decode()}),
    tool(2, "list_files", {})))
put("mcp_engine", "cancel_in_flight", session(0, tool(1, "run_python", {"code": "print(2)"}),
                                              rpc(None, "notifications/cancelled", {"requestId": 1}),
                                              tool(1, "run_python", {"code": "again"}),
                                              tool(2, "reset", {})))
put("mcp_engine", "invalid", bytes([1]) + "\n".join([
    "{", rpc(1, "tools/list"), js([{"jsonrpc": "2.0", "id": 1, "method": "ping"}]), "42",
    js({"jsonrpc": "1.0", "id": 3, "method": "ping"}), js({"jsonrpc": "2.0", "id": None, "method": "ping"}),
    js({"jsonrpc": "2.0", "id": 7, "method": "ping", "params": []}), init, init,
    tool(9, "run_python", {"code": 3}), tool(10, "nope", {}), tool(11, "reset", {"x": 1}),
    js({"jsonrpc": "2.0", "id": 99, "result": {}}), "[" * 70 + "]" * 70]).encode())
put("mcp_engine", "old_protocol", bytes([1]) + "\n".join([
    rpc(0, "initialize", {"protocolVersion": "2024-11-05"}), rpc(1, "tools/list"),
    tool(2, "run_python", {"code": "print(1)"})]).encode())

# Results and listings with members of another type ended the MCP server.
put("mcp_engine", "regress_result_truncated_not_bool", session(1, tool(1, "run_python", {
    "code": js({"status": "ok", "stdout_truncated": 1})})))
put("mcp_engine", "regress_session_state_not_string", session(1, tool(1, "run_python", {
    "code": js({"status": "ok", "session_state": 1})})))
put("mcp_engine", "regress_listing_directory_not_bool", session(1, tool(1, "upload_file", {
    "path": ".listing",
    "content_base64": base64.b64encode(js({"files": [{"path": "a", "directory": "yes"}]}).encode()).decode()}),
    tool(2, "list_files", {})))

# --- config: kiln.toml text -----------------------------------------------------
with open(os.path.join(HERE, "..", "kiln.toml"), "rb") as f:
    put("config", "kiln.toml", f.read())
put("config", "defaults_and_max", '[profiles.p]\n[profiles.p.defaults]\ntimeout = "10s"\n'
    'memory = "256m"\n[profiles.p.max]\ntimeout = 20\nmemory = "1g"\n')
put("config", "server_tenants", '[server]\nlisten = "0.0.0.0:9000"\nqueue = 3\nmax_body = "1m"\n'
    'store_code = false\nmcp_allowed_origins = ["https://app.example"]\n[tenants.big]\n'
    'max_concurrent = 10\nrate = 100\nburst = 200\n[profiles.default]\n')
put("config", "pool", '[pool]\nenabled = false\nmin = 2\nmax = 12\ntarget_wait = 0.01\n'
    'preload = ["numpy"]\n[profiles.default]\n[profiles.quiet]\npool = false\n')
put("config", "durations", '[server]\nqueue_timeout = "500ms"\nclient_timeout = 1.5\n'
    'session_idle_ttl = "2m"\ninterrupt_grace = "250ms"\n[profiles.a.defaults]\ncpu_time = "1s"\n')
put("config", "bad_values", '[profiles.a]\nimport_policy = "maybe"\n[profiles.a.defaults]\n'
    'memory = "12parsecs"\ntimeout = -3\npids = 1.5\n')
put("config", "unterminated", "[profiles.a\n")
# Durations past what their consumers' clocks hold used to be accepted.
put("config", "regress_duration_inf", "[server]\nqueue_timeout = inf\n[profiles.default]\n")
put("config", "regress_duration_unit_overflow", '[server]\nsession_idle_ttl = "1e308m"\n[profiles.default]\n')
put("config", "regress_max_timeout_1e300", "[profiles.default.max]\ntimeout = 1e300\n")
put("config", "non_ascii_in_strings_and_comments",
    '# caf\u00e9\n[server]\nmcp_allowed_origins = ["https://caf\u00e9.example"]\n[profiles.default]\n')
