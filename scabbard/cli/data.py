"""``scabbard data list|check``: the generated datasets."""

from __future__ import annotations

import sys

from scabbard.cli.common import add_data_root, data_root, hidden_alias, shared_flag


# -- data --------------------------------------------------------------------------------------
def add(sub) -> None:
    p = sub.add_parser("data", help="list and check generated datasets",
                       description="List generated datasets or validate one.")
    dsub = p.add_subparsers(dest="data_cmd", required=True)
    lp = dsub.add_parser("list", help="list datasets under a root folder")
    add_data_root(lp)
    hidden_alias(lp, "--root", dest="data_root")
    lp.set_defaults(func=_run_data_list)
    cp = dsub.add_parser("check", help="validate a dataset folder (manifest, schema, sizes)")
    cp.add_argument("path", help="dataset folder, e.g. data/lrb/small")
    shared_flag(cp, "--verify")
    cp.set_defaults(func=_run_data_check)


def _run_data_list(args) -> int:
    from scabbard.data import listing

    print(listing(data_root(args)))
    return 0


def _run_data_check(args) -> int:
    from scabbard.cli.errors import EXIT_FAILURE
    from scabbard.data import DatasetError, open_dataset
    from scabbard.workloads import check_dataset

    ds = open_dataset(args.path, verify=False)  # not a dataset folder: a mistaken path (exit 2)
    try:
        print(check_dataset(ds, args.verify))
    except DatasetError as e:  # the check's verdict: this dataset is damaged (exit 1)
        print(f"scabbard: error: {e.one_line()}", file=sys.stderr)
        return EXIT_FAILURE
    return 0
