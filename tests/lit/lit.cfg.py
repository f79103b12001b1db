# lit configuration for the basp compiler tests (frontend, IR, passes, schedule).
import os
import lit.formats

config.name = "basp"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".basp", ".bir", ".test"]
config.excludes = ["Inputs", "lit.cfg.py"]
config.test_source_root = os.path.dirname(__file__)

bin_dir = lit_config.params.get("bin_dir") or os.environ.get("BASP_BIN_DIR", "")
llvm_bin = lit_config.params.get("llvm_bin", "/usr/lib/llvm-14/bin")
src_root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
config.test_exec_root = os.path.join(bin_dir or "/tmp", "lit-out")

config.substitutions.append(("%baspc", os.path.join(bin_dir, "baspc")))
config.substitutions.append(("%basp-opt", os.path.join(bin_dir, "basp-opt")))
config.substitutions.append(("%examples", os.path.join(src_root, "examples")))
config.substitutions.append(("%inputs", os.path.join(os.path.dirname(__file__), "Inputs")))
# The pass plugins tests/plugin builds (the hpZ example and fixtures).
plugin_dir = lit_config.params.get("plugin_dir") or os.path.join(bin_dir, "plugins")
config.substitutions.append(("%plugins", plugin_dir))
config.environment["PATH"] = os.pathsep.join([llvm_bin, bin_dir, config.environment.get("PATH", "/usr/bin:/bin")])
