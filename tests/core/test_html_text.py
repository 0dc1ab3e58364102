"""HTML as knowledge text: line for line, markup gone, headings as Markdown headings."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from orchestrator.core.html_text import html_text

PAGE = """<html><head><title>Guide</title>
<style>p { color: red }
</style></head>
<body><h1>Install</h1>
<p>Run <code>pip install x</code> &amp; enjoy.</p>
<!-- a comment
over lines -->
<h2 class="a">Config</h2><p>Set <b>X_URL</b>.</p>
<script>var a = "<p>not text</p>";
</script></body></html>"""


def test_the_text_keeps_every_line_where_it_was():
    out = html_text(PAGE).split("\n")
    assert len(out) == len(PAGE.split("\n"))
    assert out[3] == "# Install"
    assert out[4] == "Run pip install x & enjoy."
    assert out[7] == "## Config Set X_URL."
    assert "not text" not in html_text(PAGE)
    assert "color" not in html_text(PAGE)
    assert "comment" not in html_text(PAGE)


def test_a_tag_across_lines_keeps_the_lines():
    assert html_text('<a\nhref="x">link</a> &lt;b&gt;') == "\nlink <b>"


@given(st.text())
def test_any_text_keeps_its_number_of_lines(text: str):
    assert html_text(text).count("\n") == text.count("\n")
