import sys
try:
    compile(open(sys.argv[1], 'rb').read(), sys.argv[1], 'exec')
except SyntaxError as e:
    # Compiled from bytes, offsets count bytes of the line in UTF-8; print characters, as the
    # other checkers do. The end (Python 3.10+) is exclusive: printed as the column before it.
    line = (e.text or '').encode()
    def col(n):
        return len(line[:n - 1].decode(errors='ignore')) + 1 if n and n > 0 else 1
    at = '%d:%d' % (e.lineno or 1, col(e.offset))
    end = getattr(e, 'end_offset', None)
    if end and (getattr(e, 'end_lineno', None) or 0) == (e.lineno or 1) and end > (e.offset or 0):
        at += ':%d:%d' % (e.end_lineno, col(end) - 1)
    print('%s:%s: error: %s' % (sys.argv[1], at, e.msg))
