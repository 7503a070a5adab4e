"""Judges a HumanEval candidate inside the sandbox (standard library only; `r1kit.benchmarking.judges.humaneval_program`
appends `main(SPEC)` to this file's text and runs it as the program).

The candidate runs in a fresh interpreter of its own (never forked from here, so it holds no copy of the tests);
this driver runs the problem's tests and calls the candidate through a pipe. Arguments and results cross as tagged
JSON and are rebuilt here from plain types only: an object that fakes equality cannot cross, a candidate that exits
early only ends its own process (the next call raises), and the pass line is printed only after `check()` returned.
"""

import json
import math
import os
import subprocess
import sys

# Shared by the driver and the candidate's runner: plain values <-> tagged JSON (exact types only; a subclass of int
# with its own __eq__ is refused, not converted).
CODEC = r"""
def encode(x):
    t = type(x)
    if x is None or t is bool or t is str:
        return {"v": x}
    if t is int:
        return {"i": str(x)}
    if t is float:
        return {"f": repr(x)}
    if t is complex:
        return {"c": [repr(x.real), repr(x.imag)]}
    if t is bytes:
        return {"b": x.hex()}
    if t in (list, tuple, set, frozenset):
        return {t.__name__: [encode(i) for i in x]}
    if t is dict:
        return {"dict": [[encode(k), encode(v)] for k, v in x.items()]}
    raise TypeError("a value of type %s cannot cross to the judge" % t.__name__)


def decode(tagged):
    if type(tagged) is not dict or len(tagged) != 1:
        raise ValueError("malformed value")
    (tag, value), = tagged.items()
    if tag == "v" and (value is None or type(value) in (bool, str)):
        return value
    if tag == "i" and type(value) is str:
        return int(value)
    if tag == "f" and type(value) is str:
        return float(value)
    if tag == "c" and type(value) is list and len(value) == 2:
        return complex(float(value[0]), float(value[1]))
    if tag == "b" and type(value) is str:
        return bytes.fromhex(value)
    if tag in ("list", "tuple", "set", "frozenset") and type(value) is list:
        return {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}[tag](decode(v) for v in value)
    if tag == "dict" and type(value) is list:
        return {decode(k): decode(v) for k, v in value}
    raise ValueError("malformed value")
"""

RUNNER = CODEC + r"""
import builtins, json, os, sys
proto_in, proto_out = os.fdopen(int(sys.argv[1]), "r"), os.fdopen(int(sys.argv[2]), "w")
sys.stdout = open(os.devnull, "w")
spec = json.loads(proto_in.readline())
namespace = {"__name__": "__main__", "__builtins__": builtins}
try:
    exec(compile(spec["candidate"], "solution.py", "exec"), namespace)
    function = namespace[spec["entry_point"]]
except BaseException as e:
    proto_out.write(json.dumps({"error": "load: " + type(e).__name__}) + "\n")
    proto_out.flush()
    raise SystemExit(1)
proto_out.write(json.dumps({"ready": True}) + "\n")
proto_out.flush()
for line in proto_in:
    try:
        reply = {"value": encode(function(*[decode(a) for a in json.loads(line)]))}
    except BaseException as e:
        reply = {"error": type(e).__name__}
    proto_out.write(json.dumps(reply) + "\n")
    proto_out.flush()
"""
exec(CODEC)


class Candidate:
    """Calls the candidate function in its own interpreter, through a pair of pipes."""

    def __init__(self, source, entry_point):
        to_child, self._send = os.pipe()
        self._receive, from_child = os.pipe()
        self.process = subprocess.Popen([sys.executable, "-I", "-S", "-c", RUNNER, str(to_child), str(from_child)],
                                        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        pass_fds=(to_child, from_child))
        os.close(to_child)
        os.close(from_child)
        self._out = os.fdopen(self._send, "w")
        self._in = os.fdopen(self._receive, "r")
        self._out.write(json.dumps({"candidate": source, "entry_point": entry_point}) + "\n")
        self._out.flush()
        if json.loads(self._in.readline() or "{}").get("ready") is not True:
            raise RuntimeError("the candidate did not load")

    def __call__(self, *args):
        self._out.write(json.dumps([encode(a) for a in args]) + "\n")  # noqa: F821 - defined by exec(CODEC)
        self._out.flush()
        line = self._in.readline()
        if not line:
            raise RuntimeError("the candidate's process ended")
        reply = json.loads(line)
        if type(reply) is not dict:
            raise ValueError("malformed reply from the candidate")
        if "error" in reply:
            raise RuntimeError(f"the candidate raised {reply['error']}")
        return decode(reply["value"])  # noqa: F821 - defined by exec(CODEC)


def main(spec_json):
    spec = json.loads(spec_json)
    candidate = Candidate(spec["candidate"], spec["entry_point"])
    namespace = {"__name__": "__main__", "math": math}
    exec(compile(spec["prompt"], "prompt.py", "exec"), namespace)  # the problem's helpers (trusted dataset code)
    namespace[spec["entry_point"]] = candidate  # some tests call the function by its name
    exec(compile(spec["test"], "test.py", "exec"), namespace)
    namespace["check"](candidate)
    print(spec["passed"], flush=True)
