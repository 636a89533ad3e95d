"""The HTTP surface: the JSON API (`api/`), the HTML pages (`pages/`), the audit exports
both serve (`export`) and the URL map (`urls`)."""
