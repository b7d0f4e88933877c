# lit configuration for Tessel's pass and dialect tests.
import os
import lit.formats

config.name = "Tessel"
config.test_format = lit.formats.ShTest(True)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.tessel_binary_dir, "tests", "lit")
config.environment["PATH"] = os.pathsep.join(
    [config.tessel_tools_dir, config.llvm_tools_dir, config.environment.get("PATH", "")])
