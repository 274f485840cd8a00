#include "log_panel.hpp"

#include <QComboBox>
#include <QFontDatabase>
#include <QHBoxLayout>
#include <QLabel>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QScrollBar>
#include <QVBoxLayout>
#include <algorithm>

#include "core/log.hpp"

namespace nanscope::gui {

void QtLogSink::sink_it_(const spdlog::details::log_msg& msg) {
  spdlog::memory_buf_t buf;
  formatter_->format(msg, buf);
  QString text = QString::fromUtf8(buf.data(), static_cast<int>(buf.size())).trimmed();
  // Emitting from another thread: AutoConnection queues it to the panel's thread.
  emit bridge_->line(static_cast<int>(msg.level), text);
}

LogPanel::LogPanel(QWidget* parent) : QWidget(parent), view_(new QPlainTextEdit), level_(new QComboBox) {
  setObjectName("logPanel");
  view_->setReadOnly(true);
  view_->setMaximumBlockCount(5000);
  view_->setLineWrapMode(QPlainTextEdit::NoWrap);
  QFont mono = QFontDatabase::systemFont(QFontDatabase::FixedFont);
  view_->setFont(mono);

  level_->addItem(tr("Debug and above"), static_cast<int>(spdlog::level::debug));
  level_->addItem(tr("Info and above"), static_cast<int>(spdlog::level::info));
  level_->addItem(tr("Warnings and errors"), static_cast<int>(spdlog::level::warn));
  level_->addItem(tr("Errors only"), static_cast<int>(spdlog::level::err));
  level_->setCurrentIndex(1);
  auto* clear = new QPushButton(tr("Clear"));
  connect(clear, &QPushButton::clicked, view_, &QPlainTextEdit::clear);
  connect(level_, qOverload<int>(&QComboBox::currentIndexChanged), this, &LogPanel::apply_level);

  auto* top = new QHBoxLayout;
  top->addWidget(new QLabel(tr("Show:")));
  top->addWidget(level_);
  top->addStretch();
  top->addWidget(clear);
  auto* layout = new QVBoxLayout(this);
  layout->setContentsMargins(4, 4, 4, 4);
  layout->addLayout(top);
  layout->addWidget(view_);

  connect(&bridge_, &LogBridge::line, this, &LogPanel::append, Qt::QueuedConnection);
  sink_ = std::make_shared<QtLogSink>(&bridge_);
  sink_->set_pattern("%H:%M:%S.%e %^%l%$ %v");
  auto logger = log::logger();
  logger->sinks().push_back(sink_);
  apply_level(level_->currentIndex());
}

LogPanel::~LogPanel() {
  // The engine thread has stopped by now (the main window shuts it down first),
  // but remove the sink under the logger's own discipline anyway.
  auto logger = log::logger();
  auto& sinks = logger->sinks();
  sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
}

void LogPanel::apply_level(int index) {
  const auto level = static_cast<spdlog::level::level_enum>(level_->itemData(index).toInt());
  sink_->set_level(level);
  // The logger drops messages below its own level before any sink sees them.
  auto logger = log::logger();
  if (logger->level() > level) logger->set_level(level);
}

void LogPanel::append(int level, const QString& text) {
  QString color;
  if (level >= static_cast<int>(spdlog::level::err))
    color = "#c0392b";
  else if (level == static_cast<int>(spdlog::level::warn))
    color = "#b9770e";
  if (color.isEmpty())
    view_->appendPlainText(text);
  else
    view_->appendHtml(QString("<span style='color:%1'>%2</span>").arg(color, text.toHtmlEscaped()));
  view_->verticalScrollBar()->setValue(view_->verticalScrollBar()->maximum());
}

QString LogPanel::text() const { return view_->toPlainText(); }

}  // namespace nanscope::gui
