"""Chapter teaching helpers used by notebooks (call trace, provider adapters); not the engine."""
