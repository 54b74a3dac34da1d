"""The counts the bench's ideal time rests on: distinct prompt tokens and distinct logits rows read."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from appliance.bench.e2e import ReadPrompt, distinct_read_rows, unique_prefix_tokens


def test_a_row_read_by_two_prompts_that_share_its_prefix_counts_once() -> None:
    context, reply = [1, 2, 3, 4], [5, 6, 7]
    conditional: ReadPrompt = (context + reply, range(3, 6))  # the reply's three tokens, read from the context's last
    follow_up: ReadPrompt = ([*context, *reply, 8, 9], range(3, 8))  # the same rows, then its own two
    other_reply: ReadPrompt = ([*context, 9, 9], range(3, 5))  # row 3 is the context's: shared; row 4 is new
    assert distinct_read_rows([conditional]) == 3
    assert distinct_read_rows([conditional, follow_up]) == 5
    assert distinct_read_rows([conditional, follow_up, other_reply]) == 6
    generation: ReadPrompt = ([7, 7, 7], range(2, 3))  # a generation reads its last row only
    assert distinct_read_rows([generation, generation]) == 1


prompts = st.lists(
    st.lists(st.integers(0, 3), min_size=1, max_size=12).flatmap(
        lambda tokens: st.integers(0, len(tokens) - 1).map(lambda start: (tokens, range(start, len(tokens))))
    ),
    min_size=1,
    max_size=8,
)


@given(prompts)
def test_rows_read_are_nodes_of_the_prefix_tree_and_no_fewer_than_any_prompt_reads(found: list[ReadPrompt]) -> None:
    rows = distinct_read_rows(found)
    assert max(len(reads) for _, reads in found) <= rows <= unique_prefix_tokens([tokens for tokens, _ in found])
    assert rows <= sum(len(reads) for _, reads in found)
