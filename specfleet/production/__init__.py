"""What watches a deployed arm: the canary's verdict, the monitor's basis and its Prometheus rules, the traffic
block a production server's series imply."""
