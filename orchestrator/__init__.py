"""io-orchestrator: schedule and execute the output stages of scientific workflows."""
