#pragma once
// The log panel and the spdlog sink that feeds it. The sink may be called on
// any thread (the engine logs from its own); it hands each formatted line to
// a QObject living on the GUI thread through a queued signal.

#include <spdlog/sinks/base_sink.h>
#include <QPointer>
#include <QWidget>
#include <memory>
#include <mutex>

class QComboBox;
class QPlainTextEdit;

namespace nanscope::gui {

class LogBridge : public QObject {
  Q_OBJECT
 signals:
  void line(int level, const QString& text);
};

class QtLogSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit QtLogSink(LogBridge* bridge) : bridge_(bridge) {}

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override;
  void flush_() override {}

 private:
  LogBridge* bridge_;  // owned by the panel; the panel removes this sink before it dies
};

class LogPanel : public QWidget {
  Q_OBJECT
 public:
  explicit LogPanel(QWidget* parent = nullptr);
  ~LogPanel() override;

  // Appends a line as if it came from the engine (the GUI's own messages).
  void append(int level, const QString& text);
  QString text() const;

 private:
  void apply_level(int index);

  LogBridge bridge_;
  std::shared_ptr<QtLogSink> sink_;
  QPlainTextEdit* view_;
  QComboBox* level_;
};

}  // namespace nanscope::gui
