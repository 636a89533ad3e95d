from django.urls import path

from .consumers import RunConsumer

websocket_urlpatterns = [
    # Channels routes ASGI apps through Django's path(), whose stubs take views only.
    path("ws/runs/<uuid:run_id>/", RunConsumer.as_asgi()),  # type: ignore[arg-type]
]
