"""Tests of kiln_client: offline, and against a real `kiln serve`."""
