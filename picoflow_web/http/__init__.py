"""HTTP: the JSON API, pages, export and import, the OpenAPI document, the error shape."""
