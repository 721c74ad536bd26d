"""The live web console (issue 21): static files under static/ and the read-only
views behind `GET /ui` (DESIGN 1.2, "Web console")."""
