"""The dashboard: server-rendered pages for people (verdict history, reports, tracks, the
operator's view), signed in with an API key; docs/dashboard.md says what each page shows."""
