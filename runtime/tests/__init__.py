"""Tests of kiln's in-sandbox runtime (no sandbox needed).

Run with Debian's interpreter, the one the sandbox uses:
    /usr/bin/python3 -m unittest discover -s runtime/tests -t runtime
"""
