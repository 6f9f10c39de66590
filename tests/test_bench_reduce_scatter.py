"""scripts/bench_reduce_scatter.py under real MPI: every form checked exactly, then timed; a wrong form stops it.
Both collectives: reduce_scatter's forms and all_gather's."""

import pytest

from tests.runtime_support import run_mpi

pytestmark = [pytest.mark.mpi]

FORMS = ("library", "alltoall", "ialltoall", "pairwise", "pairwise-started")


def test_every_form_is_exact_and_timed():
    job = run_mpi(4, ["-m", "scripts.bench_reduce_scatter", "--bytes", "1M", "--rounds", "2"], timeout=90)
    assert job.returncode == 0, job.stderr
    lines = job.stdout.splitlines()
    assert lines[0].startswith("# 20") and " commit " in lines[0]
    assert lines[1].startswith("# RS(data@node)") and "4 ranks (2 nodes x 2), 1 MiB, 2 rounds" in lines[1]
    assert "every output exact" in lines[1]
    assert [line.split()[0] for line in lines[2:]] == list(FORMS)


def test_a_form_that_skips_its_sums_is_refused_before_timing():
    """The pairwise exchange with its rounds never waited for (nothing received, nothing added): caught, exit 1."""
    broken = ("import sys; import p2synth.runtime.backends as b; b.PairwiseRounds.Wait = lambda self: None; "
              "from scripts.bench_reduce_scatter import main; sys.exit(main(sys.argv[1:]))")
    job = run_mpi(4, ["-c", broken, "--bytes", "1M", "--rounds", "2"], timeout=90)
    assert job.returncode != 0
    assert "pairwise: " in job.stderr and "wrong elements" in job.stderr


def test_every_all_gather_form_is_exact_and_timed():
    job = run_mpi(4, ["-m", "scripts.bench_reduce_scatter", "--collective", "all_gather", "--bytes", "1M", "--rounds", "2"],
                  timeout=90)
    assert job.returncode == 0, job.stderr
    lines = job.stdout.splitlines()
    assert lines[1].startswith("# AG(data@node) of AG(data@node) -> AG(data@core)") and "every output exact" in lines[1]
    assert [line.split()[0] for line in lines[2:]] == ["library", "ilibrary", "pairwise"]


@pytest.mark.parametrize("mutation,caught", [
    # the rounds never waited for: no block but the member's own arrives
    ("b.PairwiseRounds.Wait = lambda self: None", "pairwise: "),
    # each round's block received into the next member's place, not the sender's
    ("def wrong(self):\n"
     "    self.round += 1\n"
     "    if self.round == self.k:\n"
     "        self.pending = []\n"
     "        return\n"
     "    to, frm = (self.me + self.round) % self.k, (self.me - self.round) % self.k\n"
     "    self.pending = [self.comm.Irecv(self.places[(frm + 1) % self.k], source=frm, tag=b.EXCHANGE_TAG),\n"
     "                    self.comm.Isend(self.src, dest=to, tag=b.EXCHANGE_TAG)]\n"
     "b.PairwiseRounds._post_next = wrong", "pairwise: "),
])
def test_an_all_gather_form_with_a_misplaced_or_missing_block_is_refused_before_timing(mutation, caught):
    broken = (f"import sys; import p2synth.runtime.backends as b\n{mutation}\n"
              "from scripts.bench_reduce_scatter import main; sys.exit(main(sys.argv[1:]))")
    job = run_mpi(4, ["-c", broken, "--collective", "all_gather", "--bytes", "1M", "--rounds", "2"], timeout=90)
    assert job.returncode != 0
    assert caught in job.stderr and "wrong elements" in job.stderr
