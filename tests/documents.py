"""Small PDF and DOCX files made in a test, byte by byte: a PDF of pages of text lines (Helvetica,
one text object a page) and a DOCX of headings and paragraphs, with no library to write them."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Sequence


def _escaped(line: str) -> str:
    return line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


# A standard security handler whose user password is not the empty one: a reader asks for it.
_ENCRYPT = b" /Encrypt << /Filter /Standard /V 1 /R 2 /O <%s> /U <%s> /P -4 >> /ID [<%s> <%s>]" % (
    b"11" * 32,
    b"22" * 32,
    b"33" * 16,
    b"33" * 16,
)


def pdf_bytes(pages: Sequence[Sequence[str]], *, encrypted: bool = False) -> bytes:
    """A PDF whose page N holds the lines ``pages[N - 1]``, top to bottom (``encrypted``: one
    that needs a password)."""
    count = len(pages)
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(count))
    font = 3 + 2 * count
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {count} >>".encode(),
    ]
    for i, lines in enumerate(pages):
        shown = " ".join(f"({_escaped(line)}) Tj T*" for line in lines)
        stream = f"BT /F1 12 Tf 16 TL 72 720 Td {shown} ET".encode("latin-1")
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * i} 0 R "
            f"/Resources << /Font << /F1 {font} 0 R >> >> >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(stream), stream))
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n%s\nendobj\n" % (number, body))
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    trailer = b"/Size %d /Root 1 0 R%s" % (len(objects) + 1, _ENCRYPT if encrypted else b"")
    out.write(b"trailer\n<< %s >>\nstartxref\n%d\n%%%%EOF\n" % (trailer, xref))
    return out.getvalue()


_CONTENT_TYPES = """<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">
<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>
<Default Extension="xml" ContentType="application/xml"/>
<Override PartName="/word/document.xml"
 ContentType="application/vnd.openxmlformats-officedocument.wordprocessingml.document.main+xml"/>
</Types>"""
_RELS = """<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">
<Relationship Id="rId1" Target="word/document.xml"
 Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument"/>
</Relationships>"""
_NS = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"


def _xml(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def docx_bytes(blocks: Sequence[tuple[str, str]]) -> bytes:
    """A DOCX of ``(style, text)`` paragraphs: style ``Heading1``, ``Heading2`` or ``""``."""
    paragraphs = []
    for style, text in blocks:
        props = f'<w:pPr><w:pStyle w:val="{style}"/></w:pPr>' if style else ""
        paragraphs.append(f"<w:p>{props}<w:r><w:t>{_xml(text)}</w:t></w:r></w:p>")
    document = (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>'
        f'<w:document xmlns:w="{_NS}"><w:body>{"".join(paragraphs)}</w:body></w:document>'
    )
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", _CONTENT_TYPES)
        archive.writestr("_rels/.rels", _RELS)
        archive.writestr("word/document.xml", document)
    return out.getvalue()
