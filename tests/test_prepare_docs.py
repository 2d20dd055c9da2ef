"""docs/shards.md lists exactly the shard schema's columns (it is generated from the schema)."""

from pathlib import Path

from caption_debias.schema import shard_columns, shard_columns_markdown

DOC = Path(__file__).resolve().parents[1] / "docs" / "shards.md"


def test_shards_doc_column_table_is_generated_from_the_schema():
    text = DOC.read_text(encoding="utf-8")
    table = text.split("<!-- columns:begin -->\n", 1)[1].split("\n<!-- columns:end -->", 1)[0]
    assert table == shard_columns_markdown()
    for name in shard_columns():
        assert f"| `{name}` |" in table


def test_shards_doc_manifest_table_is_generated_from_the_schema():
    from caption_debias.schema import manifest_fields_markdown, manifest_schema

    text = DOC.read_text(encoding="utf-8")
    table = text.split("<!-- manifest:begin -->\n", 1)[1].split("\n<!-- manifest:end -->", 1)[0]
    assert table == manifest_fields_markdown()
    for name in manifest_schema()["properties"]:
        assert f"| `{name}` |" in table
    assert "| `curation.sentence_keep` |" in table
