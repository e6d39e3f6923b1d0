"""Run by CI with the Python of a virtual environment where `pip install .` put kgen, from outside
the source tree and with KGEN_LIBRARY unset: kgen must import, find the libkgen.so bundled in its
package directory, and report its version."""
import os
import sys
from pathlib import Path

assert "KGEN_LIBRARY" not in os.environ, "unset KGEN_LIBRARY for this check"
import kgen
from kgen import _lib

package_dir = Path(kgen.__file__).resolve().parent
assert "site-packages" in package_dir.parts, f"kgen imported from {package_dir}, not from the installed package"
_lib.library()
library = Path(_lib.library_path()).resolve()
assert library.parent == package_dir, f"loaded {library}, not the library inside {package_dir}"
print(f"kgen {kgen.__version__} from {package_dir}, library {library.name} ({library.stat().st_size // 1024} KiB)")
sys.exit(0)
