"""Importers of other tools' history formats into checker inputs."""
