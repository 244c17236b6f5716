"""``specfleet report``: a sweep's results as one self-contained HTML file and a markdown summary."""
