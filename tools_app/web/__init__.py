"""HTTP: pages (views, forms, template tags) and the JSON API (api, api tokens). Thin:
reads through selectors, writes through services."""
