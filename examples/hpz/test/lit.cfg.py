# lit configuration for the hpZ plugin's own tests, run against an
# installed basp (docs/writing-a-pass.md):
#   lit examples/hpz/test --param prefix=PREFIX --param plugin=build-hpz/libbasp_hpz.so
# FileCheck comes from LLVM (Debian: llvm-14-tools); --param llvm_bin=DIR
# when it is not on PATH.
import os
import lit.formats

config.name = "hpz"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".basp"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = lit_config.params.get("work", "/tmp/hpz-lit")

prefix = lit_config.params.get("prefix")
plugin = lit_config.params.get("plugin")
if not prefix or not plugin:
    lit_config.fatal("pass --param prefix=PREFIX (where basp is installed) and --param plugin=FILE.so")
llvm_bin = lit_config.params.get("llvm_bin", "/usr/lib/llvm-14/bin")
config.substitutions.append(("%baspc", os.path.join(prefix, "bin", "baspc")))
config.substitutions.append(("%plugin", os.path.abspath(plugin)))
config.environment["PATH"] = os.pathsep.join([llvm_bin, config.environment.get("PATH", "/usr/bin:/bin")])
