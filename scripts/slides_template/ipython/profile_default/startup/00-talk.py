# `make talk` starts every kernel with IPYTHONDIR here: a kernel (a restart too) is ready for
# the talk's demos before its first cell runs, on every platform (see prepare_kernel).
from talk_helpers.notebook.talk import prepare_kernel

prepare_kernel()
