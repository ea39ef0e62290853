"""The engine: manifest, finding the course, staging, running, typed records, lab regions, files."""
