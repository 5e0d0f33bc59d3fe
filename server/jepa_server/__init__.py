"""jepa_server: the HTTP serving shell over the jepa engine."""
