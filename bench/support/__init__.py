"""The stand-ins and worlds the benches and the tests share: a local Hugging Face Hub stand-in server
(:mod:`.hub_server`), the simulated deployment (:mod:`.simulation`), writers of real-format result files
(:mod:`.formats`), the served stack's helpers (:mod:`.served`). Kept outside ``tests/`` so a bench never
imports a test."""
