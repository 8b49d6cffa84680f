# Created by Cairn's compat-tests/kafka-python/setup.sh: the sdist's test/
# directory has no __init__.py, so `import test...` would otherwise resolve
# to CPython's own `test` package.
