"""The KIP-966 clean shutdown file: written after a clean shutdown, taken at start."""

from __future__ import annotations

from pathlib import Path

from broker_agent import clean_shutdown


def test_a_written_epoch_is_taken_once_then_the_shutdown_reads_as_unclean(tmp_path: Path) -> None:
    clean_shutdown.write(tmp_path / "b4", 123)
    assert clean_shutdown.take(tmp_path / "b4") == 123
    # taken: a crash after this start must read as unclean
    assert clean_shutdown.take(tmp_path / "b4") == clean_shutdown.NO_EPOCH


def test_no_file_means_an_unclean_shutdown(tmp_path: Path) -> None:
    assert clean_shutdown.take(tmp_path) == -1


def test_an_unreadable_file_is_an_unclean_shutdown_and_is_removed(tmp_path: Path) -> None:
    for text in ("{", '{"broker_epoch": "7"}', '{"broker_epoch": -3}', "[]"):
        (tmp_path / clean_shutdown.FILE_NAME).write_text(text)
        assert clean_shutdown.take(tmp_path) == -1
        assert not (tmp_path / clean_shutdown.FILE_NAME).exists()


def test_bytes_that_are_not_utf8_or_a_directory_there_read_as_unclean(tmp_path: Path) -> None:
    """Both crashed the agent at every start with a traceback (UnicodeDecodeError,
    IsADirectoryError) until someone removed the file by hand."""
    (tmp_path / clean_shutdown.FILE_NAME).write_bytes(b"\xff\xfe")
    assert clean_shutdown.take(tmp_path) == -1
    assert not (tmp_path / clean_shutdown.FILE_NAME).exists()
    (tmp_path / clean_shutdown.FILE_NAME).mkdir()
    assert clean_shutdown.take(tmp_path) == -1  # left there, said in the log
    assert (tmp_path / clean_shutdown.FILE_NAME).is_dir()
