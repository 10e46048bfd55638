#!/usr/bin/python3
"""Reads a TensorBoard event file the way TensorBoard does, independently of mpc's writer.

Used by tests/integration/tensorboard_test.cc. The TFRecord framing is parsed here and
both masked CRC-32Cs of every record are checked with a CRC-32C of this file's own; the
Event / Summary messages are decoded with python3-protobuf from descriptors built here
from TensorFlow's field numbers (tensorflow/core/util/event.proto and
tensorflow/core/framework/summary.proto), not from mpc's proto/tensorboard_event.proto,
so a wrong field number there shows up as a failure here.

Prints "file_version<TAB>VERSION" for the first record, "session_start<TAB>STEP" for the
second (a SessionLog START), then one line per scalar:
"TAG<TAB>STEP<TAB>VALUE", VALUE as Python's repr of the float32 (exact). Exits 1 with a
message on the first problem: a bad CRC, a truncated record, an event of another kind.
"""
import struct
import sys

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory


def _crc32c_table():
    table = []
    for i in range(256):
        crc = i
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _crc32c_table()


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _event_class():
    """The Event message class, from descriptors written out field by field."""
    F = descriptor_pb2.FieldDescriptorProto
    f = descriptor_pb2.FileDescriptorProto(name="tb_reader_event.proto", package="tbreader", syntax="proto3")

    def field(msg, name, number, ftype, type_name=None, label=F.LABEL_OPTIONAL, oneof=None):
        fd = msg.field.add(name=name, number=number, type=ftype, label=label)
        if type_name:
            fd.type_name = type_name
        if oneof is not None:
            fd.oneof_index = oneof

    summary = f.message_type.add(name="Summary")
    value = summary.nested_type.add(name="Value")
    value.oneof_decl.add(name="value")
    field(value, "tag", 1, F.TYPE_STRING)
    field(value, "simple_value", 2, F.TYPE_FLOAT, oneof=0)
    field(summary, "value", 1, F.TYPE_MESSAGE, ".tbreader.Summary.Value", label=F.LABEL_REPEATED)
    # SessionLog's status enum read as its varint: START is 1.
    session_log = f.message_type.add(name="SessionLog")
    field(session_log, "status", 1, F.TYPE_INT32)
    event = f.message_type.add(name="Event")
    event.oneof_decl.add(name="what")
    field(event, "wall_time", 1, F.TYPE_DOUBLE)
    field(event, "step", 2, F.TYPE_INT64)
    field(event, "file_version", 3, F.TYPE_STRING, oneof=0)
    field(event, "summary", 5, F.TYPE_MESSAGE, ".tbreader.Summary", oneof=0)
    field(event, "session_log", 7, F.TYPE_MESSAGE, ".tbreader.SessionLog", oneof=0)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    desc = pool.FindMessageTypeByName("tbreader.Event")
    if hasattr(message_factory, "GetMessageClass"):  # protobuf >= 4.22
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pool).GetPrototype(desc)


def fail(message):
    sys.stderr.write("read_tensorboard.py: %s\n" % message)
    sys.exit(1)


def records(data):
    """Yields each record's bytes, checking the framing and both CRCs."""
    pos = 0
    index = 0
    while pos < len(data):
        if len(data) - pos < 12:
            fail("record %d: truncated header at byte %d" % (index, pos))
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if length_crc != masked_crc32c(header):
            fail("record %d: bad length CRC %#010x, expected %#010x" % (index, length_crc, masked_crc32c(header)))
        body = data[pos + 12:pos + 12 + length]
        if len(body) != length or len(data) < pos + 16 + length:
            fail("record %d: truncated (length %d at byte %d)" % (index, length, pos))
        (body_crc,) = struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])
        if body_crc != masked_crc32c(body):
            fail("record %d: bad data CRC %#010x, expected %#010x" % (index, body_crc, masked_crc32c(body)))
        yield body
        pos += 16 + length
        index += 1


def main():
    if len(sys.argv) != 2:
        fail("usage: read_tensorboard.py EVENT_FILE")
    # The CRC itself against the standard check value, so a broken reader cannot agree
    # with a broken writer.
    if crc32c(b"123456789") != 0xE3069283:
        fail("self-test: crc32c('123456789') is %#010x" % crc32c(b"123456789"))
    Event = _event_class()
    with open(sys.argv[1], "rb") as f:
        data = f.read()
    out = []
    for index, body in enumerate(records(data)):
        event = Event()
        event.ParseFromString(body)
        what = event.WhichOneof("what")
        if event.wall_time < 1e9:
            fail("record %d: wall_time %r is not a plausible Unix time" % (index, event.wall_time))
        if index == 0:
            if what != "file_version":
                fail("record 0 is a %s event, not the file_version" % what)
            out.append("file_version\t%s" % event.file_version)
            continue
        if index == 1:
            if what != "session_log" or event.session_log.status != 1:
                fail("record 1 is not a session_log START event (%s)" % what)
            out.append("session_start\t%d" % event.step)
            continue
        if what != "summary":
            fail("record %d is a %s event, not a summary" % (index, what))
        for value in event.summary.value:
            if value.WhichOneof("value") != "simple_value":
                fail("record %d: tag %s has no simple_value" % (index, value.tag))
            out.append("%s\t%d\t%r" % (value.tag, event.step, value.simple_value))
    if not out:
        fail("empty file")
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
