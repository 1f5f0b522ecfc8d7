"""``python -m libai COMMAND ...``: the ``libai`` command (:mod:`libai.cli`)."""

from libai.cli import main

if __name__ == "__main__":
    main()
