"""``python -m dmllab``: the ``dmllab`` command line (:func:`dmllab.cli.main`)."""

import sys

from dmllab.cli import main

if __name__ == "__main__":
    sys.exit(main())
