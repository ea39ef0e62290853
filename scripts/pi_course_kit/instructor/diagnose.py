"""`pi-course diagnose 06 [NAME]`: list the mutations, or apply one to a copy and show what catches it."""

from __future__ import annotations

import argparse

from pi_course_kit.core.errors import KitError
from pi_course_kit.core.folder import find_root
from pi_course_kit.core.i18n import _
from pi_course_kit.core.manifest import ManifestError
from pi_course_kit.instructor.mutate import MutationError, mutation_diff, mutation_lab, run_mutation
from pi_course_kit.instructor.options import add_manifest_option, load_course


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the checkpoint and the optional mutation name."""
    parser.add_argument("checkpoint", metavar="CHECKPOINT", help=_("checkpoint id, e.g. 06"))
    parser.add_argument(
        "mutation", nargs="?", metavar="MUTATION", help=_("mutation name; omit it to list the mutations")
    )
    parser.add_argument(
        "--timeout", type=float, default=300.0, help=_("seconds for the test run (default 300)")
    )
    parser.add_argument(
        "--show-solution",
        action="store_true",
        help=_("inside a practice folder, show the mutation anyway (its diff shows solution code)"),
    )
    add_manifest_option(parser)


def run(args: argparse.Namespace) -> int:
    """List mutations (exit 0), or run one: exit 0 when a focused test catches it, 1 when none does."""
    if args.mutation is not None and not args.show_solution:
        try:
            find_root()
        except KitError:
            pass  # not a practice folder: the instructor's path
        else:
            # A learner's folder: the mutation diff is solution code, shown only when asked for.
            raise KitError(
                "diagnose shows solution code and is meant for instructors; "
                "add --show-solution if you really want to see it here"
            )
    course = load_course(args)
    checkpoint = course.checkpoint(args.checkpoint)
    if args.mutation is None:
        if not checkpoint.mutations:
            print(f"checkpoint {checkpoint.id} lists no mutations in {course.path}")
            return 0
        width = max(len(m.name) for m in checkpoint.mutations)
        print(
            f"Mutations of checkpoint {checkpoint.id} (apply one with "
            f"`pi-course diagnose {checkpoint.id} NAME`):"
        )
        for mutation in checkpoint.mutations:
            lab = mutation_lab(course, checkpoint, mutation)
            print(f"  {mutation.name:<{width}}  [Lab {lab or '?'}] {mutation.description}")
        return 0
    try:
        mutation = checkpoint.mutation(args.mutation)
    except ManifestError as error:
        raise KitError(f"{error}; run `pi-course diagnose {checkpoint.id}` to list them") from None
    try:
        diff = mutation_diff(course, checkpoint, mutation)
        outcome = run_mutation(course, checkpoint, mutation, timeout=args.timeout)
    except MutationError as error:
        raise KitError(str(error)) from None
    print(f"Mutation {mutation.name} (checkpoint {checkpoint.id}): {mutation.description}")
    print("The change, applied to a temporary copy of the solution (your files are untouched):")
    for line in diff:
        print(f"  {line}")
    result = outcome.result
    total = len(result.tests)
    print()
    if outcome.catches:
        print(f"Caught by {len(outcome.catches)} of {total} focused tests:")
        for test in outcome.catches:
            lab = f"Lab {test.lab}" if test.lab else "no lab"
            print(f"  FAIL {test.nodeid}  [{lab}]")
            print(f"       first failing assertion: {test.message}")
            if test.location:
                print(f"       at {test.location}")
    elif result.collect_errors:
        print("Caught before any test ran: the focused tests cannot be collected:")
        for collect_error in result.report.collect_errors:
            print(f"  {collect_error.message}")
    elif result.crashed:
        print("Caught: the test run ended without its report (timeout or crash).")
    else:
        print(f"NOT CAUGHT: all {total} focused tests pass with this mutation; the tests have a gap here.")
        return 1
    if mutation.expect:
        found = "yes" if outcome.expect_problem() is None else "no"
        print(f"Expected in the first failing assertion: {mutation.expect!r} — found: {found}")
    return 0
