import sys
try:
    compile(open(sys.argv[1], 'rb').read(), sys.argv[1], 'exec')
except SyntaxError as e:
    print('%s:%d:%d: error: %s' % (sys.argv[1], e.lineno or 1, e.offset or 1, e.msg))
