"""Each strategy's SimPy processes; its row in :data:`sim.training.strategies.STRATEGIES`
names the class here (``simulated = "module:Class"``)."""
