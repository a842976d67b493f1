"""foxhunt-dqn-host: run the fhd-host shipped in the wheel against the packaged library.

    foxhunt-dqn-host train --env CartPole-v1 --steps 50000 --out runs/cp1
"""

import os
import sys
from pathlib import Path

from ._library import LIBRARY_NAME, _PACKAGE_DIR


def main(argv=None):
    host = _PACKAGE_DIR / "bin" / "fhd-host"
    if not host.is_file():
        print("foxhunt-dqn-host: this install has no fhd-host (built with FHD_PY_HOST=OFF, or "
              "not installed from a wheel)", file=sys.stderr)
        return 3
    env = dict(os.environ)
    env.setdefault("FHD_PLUGIN", str(Path(_PACKAGE_DIR) / LIBRARY_NAME))
    args = [str(host)] + list(sys.argv[1:] if argv is None else argv)
    os.execve(str(host), args, env)


if __name__ == "__main__":
    sys.exit(main())
