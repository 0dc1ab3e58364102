"""What the daemons announce on MQTT, counted by a subscriber of the benchmark's own.

A daemon publishes each reply and each ``done`` item on its outbound stream and then on MQTT,
from a queue of its own: a run whose clock stopped at the last ``done`` on the streams would
leave out the MQTT messages still queued, and their CPU. ``MqttTally`` subscribes to every
group's topic before the run and notes when each ``done`` arrives (the wall clock, in ms, as
Redis entry ids give it), so that the run ends when every message is done on both.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Collection
from typing import Any

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from orchestrator.adapters.mqtt import mqtt_address

TOPIC = "arena/groups/+/messages"  # docs/wire-format.md, "Outbound"
CONNECT_TIMEOUT_S = 30.0


class MqttTally:
    """A subscriber to every group's messages, in a thread of its own (paho's loop)."""

    def __init__(self, url: str) -> None:
        address = mqtt_address(url)
        self.done_ms: dict[str, int] = {}  # message id -> when its done item arrived
        self._lock = threading.Condition()
        self._subscribed = threading.Event()
        self._client = mqtt.Client(CallbackAPIVersion.VERSION2)
        if address.username is not None:
            self._client.username_pw_set(address.username, address.password)
        self._client.on_connect = self._on_connect
        self._client.on_subscribe = self._on_subscribe
        self._client.on_message = self._on_message
        self._client.connect(address.hostname, address.port)
        self._client.loop_start()
        if not self._subscribed.wait(CONNECT_TIMEOUT_S):
            self.close()
            raise RuntimeError(f"no subscription to {TOPIC} at {address.where}")

    def wait(
        self,
        ids: Collection[str],
        *,
        stall_s: float,
        check: Callable[[], None],
    ) -> None:
        """Block until each of ``ids`` has its ``done`` on MQTT; ``check`` runs meanwhile (it
        raises when a daemon died).

        Raises:
            RuntimeError: no new ``done`` arrived for ``stall_s``.
        """
        wanted = set(ids)
        last_change, seen = time.monotonic(), -1
        with self._lock:
            while True:
                count = len(wanted & self.done_ms.keys())
                if count == len(wanted):
                    return
                if count != seen:
                    last_change, seen = time.monotonic(), count
                elif time.monotonic() - last_change > stall_s:
                    raise RuntimeError(
                        f"MQTT: {count} of {len(wanted)} done, then none for {stall_s:g}s"
                    )
                self._lock.wait(0.5)
                check()

    def close(self) -> None:
        self._client.loop_stop()
        self._client.disconnect()

    def _on_connect(self, client: mqtt.Client, *_: Any) -> None:
        client.subscribe(TOPIC, qos=1)

    def _on_subscribe(self, *_: Any) -> None:
        self._subscribed.set()

    def _on_message(self, client: mqtt.Client, userdata: Any, message: mqtt.MQTTMessage) -> None:
        at = int(time.time() * 1000)
        item = json.loads(message.payload)
        if item.get("type") == "done":
            with self._lock:
                self.done_ms.setdefault(item["in_reply_to"], at)
                self._lock.notify_all()
