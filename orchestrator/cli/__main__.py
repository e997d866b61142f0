"""``python -m orchestrator.cli``: ``iorch`` where its console script is not on the path.

Examples
--------
.. code-block:: console

    $ python -m orchestrator.cli policies
"""

from orchestrator.cli import main

if __name__ == "__main__":
    main()
